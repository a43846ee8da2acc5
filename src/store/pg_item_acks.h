// ItemAcks on PostgreSQL: the statements of store/item_store.h and
// store/function_ack.h on the connection a worker's task runs on, with
// their exceptions turned into statuses as item_acks.h lays out.
//
// Thread safety: one worker thread, as the connection.
#ifndef SQLGROUP_STORE_PG_ITEM_ACKS_H_
#define SQLGROUP_STORE_PG_ITEM_ACKS_H_

#include <functional>
#include <pqxx/connection>

#include "sqlgroup/item.h"
#include "store/grouped_calls.h"
#include "store/item_acks.h"

namespace sqlgroup::store {

// Call only in a catch block: the exception of a statement that settles
// items (or of a handler's own statement that says nothing of the item) as
// item_acks.h's codes. `function`: the statement calls the group's SQL
// function of that name, whose own errors are its verdict.
absl::Status AckErrorOfCurrentException(const std::string& function);

class PgItemAcks : public ItemAcks {
 public:
  // `connection`: the connection of the task at hand (never null while a
  // method runs); `function`: the group's SQL function, if the handler is
  // one (its statements prepared by PrepareFunctionAcks).
  PgItemAcks(std::function<pqxx::connection*()> connection,
             SqlFunction function)
      : connection_(std::move(connection)),
        function_(std::move(function)),
        calls_(function_.name) {}

  HandledAndAcked HandleAndAck(const ClaimRef& ref,
                               const std::vector<std::string>& ids,
                               const HandlerCall& handler,
                               const CarriedClaim* carry,
                               bool defer_alone) override;
  absl::StatusOr<std::vector<bool>> DeleteOfTakes(
      const std::string& group, const std::vector<TakeItem>& items) override;
  absl::StatusOr<AckedAndClaimed> AckInFunction(
      const ClaimRef& ref, const std::vector<std::string>& ids,
      const CarriedClaim* carry) override;
  bool CanGroupCalls() override {
    return !Gone() && !function_.name.empty() && !function_.arrays &&
           GroupedCalls::Possible(db());
  }
  absl::StatusOr<bool> CallGrouped(const ClaimRef& ref,
                                   const std::string& id) override {
    if (Gone()) return GoneError();
    return calls_.Call(db(), ref, id);
  }
  absl::Status CommitCalls() override {
    if (!Gone()) return calls_.Commit(db());
    calls_.Forget();
    return GoneError();
  }
  bool CallsOpen() const override { return calls_.open(); }
  void ForgetCalls() override { calls_.Forget(); }
  absl::StatusOr<int64_t> ReleaseForRetry(const ClaimRef& ref,
                                          const std::vector<std::string>& ids,
                                          const std::string& error,
                                          absl::Duration backoff,
                                          bool count_attempt) override;
  absl::StatusOr<bool> DeadLetter(const ClaimRef& ref, const std::string& id,
                                  const std::string& error,
                                  bool count_attempt) override;
  absl::StatusOr<std::map<std::string, int>> CountDeliveriesOfTheDead(
      const ClaimRef& ref, const std::vector<std::string>& ids,
      absl::Time died_at) override;
  absl::Status ReportCircuit(const std::string& session, bool open,
                             const std::string& error) override;
  absl::StatusOr<std::set<std::string>> StillDue(
      const ClaimRef& ref, const std::vector<std::string>& ids) override;

 private:
  pqxx::connection& db() const { return *connection_(); }
  // The connection was dropped (by an earlier statement of the same
  // task that broke it): every statement fails as on a broken one.
  bool Gone() const { return connection_() == nullptr; }
  static absl::Status GoneError() {
    return absl::UnavailableError("the connection was dropped");
  }
  // The autocommitted ack of `ids` with the claim `carry` asks for, in one
  // statement.
  AckedAndClaimed AckCarrying(const ClaimRef& ref,
                              const std::vector<std::string>& ids,
                              const CarriedClaim& carry);

  const std::function<pqxx::connection*()> connection_;
  const SqlFunction function_;
  GroupedCalls calls_;
};

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_PG_ITEM_ACKS_H_
