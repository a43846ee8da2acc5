// The connection a worker's task runs on. Connections follow work: the
// worker opens one of its own for claims when the member's budget has a
// slot and the server takes it, and closes it after idle_connection_timeout
// without tasks. Without one (no slot, a full server, or a probe that
// should not open one) it borrows the member's control connection for the
// task (LentConnection) and gives it back after it.
//
// Thread safety: one worker thread.
#ifndef SQLGROUP_MEMBER_WORKER_CONNECTION_H_
#define SQLGROUP_MEMBER_WORKER_CONNECTION_H_

#include <atomic>
#include <memory>
#include <pqxx/connection>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "member/handler_kind.h"
#include "member/lent_connection.h"
#include "member/task_connection.h"
#include "metrics.h"
#include "sqlgroup/connection_budget.h"
#include "sqlgroup/consumer.h"
#include "sqlgroup/version.h"
#include "store/connection.h"
#include "store/pg_item_acks.h"

namespace spdlog {
class logger;
}

namespace sqlgroup {

struct WorkerConnectionConfig {
  std::string dsn;
  std::string group;
  absl::Duration connect_timeout;
  bool transaction_pooler = false;
  // The member's acks share commits (SharedCommit), or its workers gather
  // theirs (GatheredAcks): the statement of several takes' acks is warmed
  // up too.
  bool shared_acks = false;
  // The group's TTL as last read: a worker connection's
  // idle-in-transaction limit is half of it. Required.
  std::shared_ptr<std::atomic<int64_t>> ttl_ns;
  // The group's ordering (true: 'key'). Null: 'none'.
  std::shared_ptr<std::atomic<bool>> key_order;
  // The database's schema version as the member last read it: statements
  // prepared for another are prepared again (schema 17's claims enforce
  // pauses). Null: never changes.
  std::shared_ptr<std::atomic<int>> schema_version;
  // The process's connection budget, and the member's control connection
  // to borrow. Required.
  std::shared_ptr<ConnectionBudget> budget;
  LentConnection* lent = nullptr;
};

class WorkerConnection : public TaskConnection {
 public:
  WorkerConnection(int index, WorkerConnectionConfig config, HandlerKind kind,
                   MemberMetrics& metrics,
                   std::shared_ptr<spdlog::logger> logger);

  // A connection for the task: the worker's own, one opened now
  // (`own_wanted`, within the budget), or the control connection borrowed;
  // then with the limits of the group's TTL now. False when none can be
  // had now (see starved()).
  bool Acquire(bool own_wanted);
  // The connection of the task at hand; null when it broke.
  pqxx::connection* get() const { return conn_; }
  // The schema version as the member read it last: statements are to be
  // prepared for it now.
  int SchemaNow() const {
    return config_.schema_version ? config_.schema_version->load()
                                  : kSchemaVersion;
  }
  // The settling statements, on the connection of the task at hand.
  store::ItemAcks& acks() { return acks_; }
  // After each task: a borrowed connection goes back to the control
  // thread; the worker's own stays for the next task.
  void GiveBack();
  // Drops the connection after `why` (a borrowed one only when it broke:
  // the control thread reconnects).
  void Disconnect(const absl::Status& why) override;
  // Whether to cut a batch short: the control thread waits for the
  // connection this worker borrowed.
  bool YieldControl() const override;
  bool Connected() const override { return conn_ != nullptr; }
  absl::Duration FunctionTimeout() const override {
    return Options().statement_timeout;
  }
  // The idle-in-transaction limit (and a SQL function's statement
  // timeout) under the group's TTL now, and setting them on the connection
  // in use (after the TTL was altered, or on a borrowed control
  // connection; false: the connection broke and was dropped).
  store::ConnectOptions Options() const;
  bool FollowTtl();
  void SleepBackoff() const;

  // Between tasks (PartWorker::Run).
  // A task went back because no slot was free: wait for one before taking
  // another.
  bool starved() const { return starved_; }
  void WaitForSlot(absl::Duration wait);
  // Tasks borrowed the control connection for want of a connection of the
  // worker's own: it opens one once no task waits, or after kWarmTasks.
  bool opens_after() const { return open_after_; }
  void AfterTask();
  void OpenAfterWarmTasks();
  bool holds() const { return own_ != nullptr || slot_; }
  bool own() const { return own_ != nullptr; }
  absl::Time own_since() const { return own_since_; }
  void CloseOwn();
  // A probe found nothing due on a borrowed control connection that runs
  // the first claim after a quiet spell: warm it while nothing waits.
  void WarmBorrowed();

 private:
  enum class Opened { kYes, kNoSlot, kFailed };
  bool Connect(bool own_wanted);
  // kNoSlot: the budget's slots are taken; kFailed: backing off after a
  // failed connect, or this one failed.
  Opened OpenOwn();
  // A slot of the budget for a connection of the worker's own, held from
  // before it opens until it closes.
  bool AcquireSlot(absl::Duration wait);
  void ReleaseSlot();
  bool BorrowControl(absl::Duration wait, bool with_slot = false);
  // Runs the claim and acknowledgement statements once on the connection
  // in use, so that its first real ones are as fast as later ones.
  void WarmUp();
  // The item statements for the database at schema `schema`.
  void PrepareStatements(pqxx::connection& conn, int schema);
  // Prepares own_'s statements for SchemaNow(); on failure closes own_
  // (logging why) and returns false.
  bool PrepareOwn();
  bool borrowed() const { return borrowed_session_ != nullptr; }
  bool KeyOrder() const {
    return config_.key_order && config_.key_order->load();
  }

  // How long a worker waits for the control connection to be lent, and,
  // after a task went back for want of a slot, for a slot to free up.
  static constexpr absl::Duration kBorrowWait = absl::Milliseconds(200);
  // How long the first claim after a quiet spell waits for the control
  // connection before it opens a connection of its own instead (about the
  // cost of opening one; it is mostly free at once).
  static constexpr absl::Duration kWarmBorrowWait = absl::Milliseconds(5);
  static constexpr int kWarmTasks = 4;

  const int index_;
  const WorkerConnectionConfig config_;
  const HandlerKind kind_;
  MemberMetrics& metrics_;
  std::shared_ptr<spdlog::logger> log_;

  std::unique_ptr<pqxx::connection> own_;
  store::ConnectionTimeouts own_timeouts_;  // own_'s
  int own_schema_ = 0;  // the schema own_'s statements were prepared for
  // The connection of the task at hand (own_, or the control connection
  // borrowed), and what is known of its session.
  pqxx::connection* conn_ = nullptr;
  store::ConnectionTimeouts* timeouts_ = nullptr;
  // While the control connection is borrowed: it, and what is known of
  // its session.
  pqxx::connection* borrowed_conn_ = nullptr;
  LentConnection::Session* borrowed_session_ = nullptr;
  bool borrowed_broken_ = false;  // tell the control thread on GiveBack
  absl::Time own_since_ = absl::InfinitePast();  // own_ opened
  absl::Time next_own_try_ = absl::InfinitePast();
  bool refused_ = false;  // the server refused the last try (an episode)
  bool slot_ = false;     // holds a slot of the budget
  bool starved_ = false;  // a task went back: no slot was free
  bool open_after_ = false;
  int warm_tasks_ = 0;
  // The control thread abandoned the connection this worker borrowed: no
  // first claims on the control connection until it had one of its own.
  bool abandoned_ = false;
  int connect_failures_ = 0;
  store::PgItemAcks acks_{[this] { return conn_; }, kind_.sql_function};
};

}  // namespace sqlgroup

#endif  // SQLGROUP_MEMBER_WORKER_CONNECTION_H_
