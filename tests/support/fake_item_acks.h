// An in-memory store::ItemAcks for unit tests of the settler: each handler
// call's outcome comes from a script (by default: the handler returns OK
// and the ack deletes every item), and every write is recorded.
#ifndef SQLGROUP_TESTS_SUPPORT_FAKE_ITEM_ACKS_H_
#define SQLGROUP_TESTS_SUPPORT_FAKE_ITEM_ACKS_H_

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "member/task_connection.h"
#include "store/item_acks.h"

namespace sqlgroup::testing {

class FakeItemAcks : public store::ItemAcks {
 public:
  // What HandleAndAck returns for a call on `ids` (the handler itself is
  // not run: the test says what it did).
  using Script = std::function<store::HandledAndAcked(
      const std::vector<std::string>& ids, const store::CarriedClaim* carry)>;
  static store::HandledAndAcked Acked(size_t n) {
    store::HandledAndAcked r;
    r.acking = true;
    r.alone = true;
    r.deleted = static_cast<int64_t>(n);
    return r;
  }
  static store::HandledAndAcked Verdict(absl::Status verdict) {
    store::HandledAndAcked r;
    r.verdict = std::move(verdict);
    return r;
  }
  static store::HandledAndAcked Error(absl::Status error, bool acking = false) {
    store::HandledAndAcked r;
    r.acking = acking;
    r.error = std::move(error);
    return r;
  }

  store::HandledAndAcked HandleAndAck(const store::ClaimRef&,
                                      const std::vector<std::string>& ids,
                                      const store::HandlerCall&,
                                      const store::CarriedClaim* carry,
                                      bool defer_alone) override {
    handled.push_back(ids);
    defer_asked.push_back(defer_alone);
    store::HandledAndAcked r = script ? script(ids, carry) : Acked(ids.size());
    if (defer_alone && r.verdict.ok() && r.error.ok() && r.alone) {
      r.deferred = true;  // the settler acks through DeleteOfTakes
      r.deleted = -1;
      r.ack_start = absl::Now();
    }
    return r;
  }
  absl::StatusOr<std::vector<bool>> DeleteOfTakes(
      const std::string&, const std::vector<store::TakeItem>& items) override {
    if (before_shared) before_shared();
    absl::MutexLock lock(&mu);
    shared_acks.push_back(items.size());
    if (!fail_shared.ok()) return fail_shared;
    if (!fail_shared_of_many.ok() && items.size() > 1) {
      return fail_shared_of_many;
    }
    std::vector<bool> deleted;
    for (const store::TakeItem& item : items) {
      deleted.push_back(!lost.count(item.id));
    }
    return deleted;
  }
  absl::StatusOr<store::AckedAndClaimed> AckInFunction(
      const store::ClaimRef&, const std::vector<std::string>& ids,
      const store::CarriedClaim*) override {
    handled.push_back(ids);
    if (!function_error.ok()) return function_error;
    store::AckedAndClaimed r;
    r.acked = static_cast<int64_t>(ids.size());
    return r;
  }
  // Grouped calls: recorded as the ids of each call (`grouped`) and each
  // commit's count (`group_commits`); `function_error` fails a call,
  // `fail_commit` every commit, `function_fails` the calls on those ids,
  // `calls_lost` the next call (once).
  bool CanGroupCalls() override { return can_group; }
  absl::StatusOr<bool> CallGrouped(const store::ClaimRef&,
                                   const std::string& id) override {
    if (!function_error.ok()) return function_error;
    if (function_fails.count(id)) {
      calls_open = true;  // the call undone; the transaction goes on
      return absl::FailedPreconditionError("sql_function raised");
    }
    if (!calls_lost.ok()) {
      const absl::Status lost_now = calls_lost;
      calls_lost = absl::OkStatus();
      calls_open = false;
      in_group = 0;
      return lost_now;
    }
    calls_open = true;
    grouped.push_back(id);
    ++in_group;
    return lost.count(id) == 0;
  }
  absl::Status CommitCalls() override {
    if (!calls_open) return absl::OkStatus();
    calls_open = false;
    group_commits.push_back(in_group);
    in_group = 0;
    return fail_commit;
  }
  bool CallsOpen() const override { return calls_open; }
  void ForgetCalls() override {
    calls_open = false;
    in_group = 0;
  }
  absl::StatusOr<int64_t> ReleaseForRetry(const store::ClaimRef&,
                                          const std::vector<std::string>& ids,
                                          const std::string& error,
                                          absl::Duration backoff,
                                          bool count_attempt) override {
    if (!fail_writes.ok()) return fail_writes;
    for (const std::string& id : ids) {
      released.push_back({id, error, backoff, count_attempt});
    }
    return static_cast<int64_t>(ids.size());
  }
  absl::StatusOr<bool> DeadLetter(const store::ClaimRef&, const std::string& id,
                                  const std::string& error,
                                  bool count_attempt) override {
    if (!fail_writes.ok()) return fail_writes;
    dead.push_back({id, error, absl::ZeroDuration(), count_attempt});
    return true;
  }
  absl::StatusOr<std::map<std::string, int>> CountDeliveriesOfTheDead(
      const store::ClaimRef&, const std::vector<std::string>& ids,
      absl::Time) override {
    dead_count_asked.push_back(ids);
    std::map<std::string, int> counted;
    for (const std::string& id : ids) {
      auto it = delivered_before.find(id);
      if (it != delivered_before.end()) counted[id] = it->second;
    }
    return counted;
  }
  absl::Status ReportCircuit(const std::string&, bool open,
                             const std::string&) override {
    circuit_reports.push_back(open);
    return absl::OkStatus();
  }
  absl::StatusOr<std::set<std::string>> StillDue(
      const store::ClaimRef&, const std::vector<std::string>& ids) override {
    still_due_asked.push_back(ids);
    if (!fail_still_due.ok()) return fail_still_due;
    std::set<std::string> due;
    for (const std::string& id : ids) {
      if (no_longer_due.count(id) == 0) due.insert(id);
    }
    return due;
  }

  struct Write {
    std::string id;
    std::string error;
    absl::Duration backoff;
    bool count_attempt = false;
  };
  Script script;
  absl::Status function_error;  // every AckInFunction fails with it
  absl::Status fail_writes;     // every release and dead-letter fails
  absl::Status fail_shared;     // every DeleteOfTakes fails with it
  bool can_group = true;
  bool calls_open = false;
  size_t in_group = 0;
  absl::Status fail_commit;
  absl::Status calls_lost;
  std::set<std::string> function_fails;
  std::vector<std::string> grouped;   // each grouped call's id
  std::vector<size_t> group_commits;  // each CommitCalls' calls
  std::set<std::string> lost;         // ids DeleteOfTakes finds gone
  // Every DeleteOfTakes of more than one item fails with it.
  absl::Status fail_shared_of_many;
  std::function<void()> before_shared;  // runs first in DeleteOfTakes
  absl::Mutex mu;                       // DeleteOfTakes's, from threads
  std::vector<size_t> shared_acks ABSL_GUARDED_BY(mu);  // their item counts
  // CountDeliveriesOfTheDead: items due when the owner died, with their
  // attempts counted now.
  std::map<std::string, int> delivered_before;
  std::vector<std::vector<std::string>> dead_count_asked;  // each call's ids
  std::vector<std::vector<std::string>> handled;           // each call's ids
  std::vector<bool> defer_asked;  // each HandleAndAck's defer_alone
  std::vector<Write> released;
  std::vector<Write> dead;
  std::vector<bool> circuit_reports;
  // StillDue: the ids it asked about, each time; those it finds gone or
  // paused; an error it fails with.
  std::vector<std::vector<std::string>> still_due_asked;
  std::set<std::string> no_longer_due;
  absl::Status fail_still_due;
};

// A TaskConnection that counts what the settler asks of it.
class FakeTaskConnection : public TaskConnection {
 public:
  void Disconnect(const absl::Status& why) override {
    disconnects.push_back(why);
    connected = false;
  }
  bool YieldControl() const override { return yield; }
  bool Connected() const override { return connected; }
  absl::Duration FunctionTimeout() const override { return absl::Seconds(5); }

  std::vector<absl::Status> disconnects;
  bool yield = false;
  bool connected = true;  // until Disconnect
};

}  // namespace sqlgroup::testing

#endif  // SQLGROUP_TESTS_SUPPORT_FAKE_ITEM_ACKS_H_
