// ControlChannel over PostgreSQL: the control connection (opened, lent to
// the workers while the control thread waits, taken back, replaced when a
// worker keeps it past a heartbeat) and the LISTENs (on the control
// connection, or on a connection of their own to listen_dsn), whose
// payloads go to a NotificationRouter.
#ifndef SQLGROUP_MEMBER_PG_CONTROL_CHANNEL_H_
#define SQLGROUP_MEMBER_PG_CONTROL_CHANNEL_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "member/control_channel.h"
#include "member/lent_connection.h"
#include "member/notification_router.h"
#include "member/part_scheduler.h"
#include "metrics.h"
#include "sqlgroup/connection_budget.h"
#include "store/channel_listener.h"
#include "store/connection.h"
#include "wakeup.h"

namespace spdlog {
class logger;
}

namespace sqlgroup {

struct ControlChannelConfig {
  std::string dsn;
  std::string group;
  absl::Duration connect_timeout;
  bool use_notify = true;
  // ConsumerOptions::transaction_pooler and listen_dsn.
  bool transaction_pooler = false;
  std::string listen_dsn;
  // Required: the control connection as the workers borrow it, and the
  // process's connection budget.
  LentConnection* lent = nullptr;
  ConnectionBudget* budget = nullptr;
};

class PgControlChannel : public ControlChannel {
 public:
  // `stop` is the member's stop request, which ends every wait.
  PgControlChannel(ControlChannelConfig config,
                   const NotificationRouter& router, PartScheduler& scheduler,
                   MemberMetrics& metrics,
                   std::shared_ptr<spdlog::logger> logger, const Wakeup& stop);
  ~PgControlChannel() override;

  // The control connection while the control thread holds it; null when
  // there is none. For the statements of PgMembershipStore.
  pqxx::connection* connection() const { return conn_.get(); }

  void SetSession(const std::string& session) override { session_ = session; }
  void SetTtl(absl::Duration ttl) override { ttl_ = ttl; }
  bool connected() const override { return conn_ != nullptr; }
  absl::Status Connect() override;
  absl::Duration retry_delay() const override { return retry_delay_; }
  void Disconnect(const absl::Status& why) override;
  void StartListening() override;
  absl::Status ListenForSession() override;
  void StopListeningForSession() override { session_listener_.reset(); }
  bool listening() const override { return listener_ != nullptr; }
  absl::StatusOr<bool> TakeBack(const KeepAlive& keep_alive,
                                bool may_replace) override;
  absl::StatusOr<bool> WaitForWork(absl::Time until,
                                   const KeepAlive& keep_alive,
                                   bool may_replace,
                                   const std::function<bool()>& woken) override;
  void LendForDrain(absl::Duration timeout) override;

 private:
  struct Orphan;
  // The control connection's limits follow the TTL (a borrower's limits
  // are undone).
  absl::Status FollowTtl();
  store::ConnectOptions ControlOptions() const;
  // `conn` (opened with `options`) is the control connection from now on:
  // lent to the workers, listening. False when it broke meanwhile.
  bool UseControl(std::unique_ptr<pqxx::connection> conn,
                  const store::ConnectOptions& options);
  // Polls instead of listening, and says so once per episode.
  void StopListening(const absl::Status& why);
  pqxx::connection& ListenConnection();
  std::unique_ptr<store::ChannelListener> Listen(const std::string& channel);
  // Opens a new control connection on the slot the borrower lent and
  // leaves the old one to it; false when it did not.
  bool ReplaceControl();
  void LendWhile(int sock, absl::Duration timeout, bool wake_on_stop);

  const ControlChannelConfig config_;
  const NotificationRouter& router_;
  PartScheduler& scheduler_;
  MemberMetrics& metrics_;
  std::shared_ptr<spdlog::logger> log_;
  const Wakeup& stop_;

  std::string session_;
  absl::Duration ttl_ = absl::ZeroDuration();
  std::unique_ptr<pqxx::connection> conn_;
  // To config_.listen_dsn, when there is one and it is open.
  std::unique_ptr<pqxx::connection> listen_conn_;
  std::unique_ptr<store::ChannelListener> listener_;          // the group's
  std::unique_ptr<store::ChannelListener> session_listener_;  // the session's
  int listen_failures_ = 0;                                   // in a row
  absl::Time next_listen_try_ = absl::InfinitePast();
  int connect_failures_ = 0;
  absl::Duration retry_delay_ = absl::ZeroDuration();
  bool waiting_for_server_ = false;  // the last connect was refused: busy
  bool dropped_ = false;  // a connection was lost: say when one is back
  // The TTL the control connection's limits last followed.
  absl::Duration followed_ttl_ = absl::ZeroDuration();
};

}  // namespace sqlgroup

#endif  // SQLGROUP_MEMBER_PG_CONTROL_CHANNEL_H_
