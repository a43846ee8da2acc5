#include "store/pg_item_acks.h"

#include <pqxx/pqxx>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "store/errors.h"
#include "store/function_ack.h"
#include "store/item_store.h"
#include "store/member_store.h"
#include "store/still_due.h"

namespace sqlgroup::store {
namespace {

// The handler's verdict; an exception is a failure with its message, except
// a broken connection or an error that says nothing of the item (a
// conflict), which are rethrown for AckErrorOfCurrentException.
absl::Status RunHandler(const HandlerCall& handler, AckTransaction& ack) {
  try {
    return handler(ack);
  } catch (const pqxx::broken_connection&) {
    throw;
  } catch (const pqxx::transaction_rollback&) {
    throw;
  } catch (const pqxx::sql_error& e) {
    if (SaysNothingOfTheItem(SqlStateOf(e))) throw;
    return absl::InternalError(absl::StrCat("handler threw: ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("handler threw: ", e.what()));
  } catch (...) {
    return absl::InternalError("handler threw a non-standard exception");
  }
}

}  // namespace

// Call only in a catch block: the exception of a statement that settles
// items as item_acks.h's codes. `function`: the statement calls the
// group's SQL function, whose own errors are its verdict.
absl::Status AckErrorOfCurrentException(const std::string& function) {
  try {
    throw;
  } catch (const pqxx::broken_connection&) {
    return absl::UnavailableError("connection lost during ack");
  } catch (const pqxx::transaction_rollback& e) {
    return absl::AbortedError(e.what());
  } catch (const pqxx::in_doubt_error& e) {
    // The commit may or may not have happened; an item still there is read
    // again, and an ack that did commit deleted it for good.
    return absl::UnknownError(
        absl::StrCat("commit outcome unknown: ", e.what()));
  } catch (const pqxx::sql_error& e) {
    const std::string state = SqlStateOf(e);
    if (SaysNothingOfTheItem(state)) return absl::AbortedError(e.what());
    if (function.empty()) {
      // The statement's own error (a missing grant, a broken schema): never
      // read as a broken connection or a conflict, which were sorted out
      // above by their exception types and states.
      const absl::Status s = StatusFromCurrentException("acknowledge");
      if (absl::IsUnavailable(s) || absl::IsUnknown(s) || absl::IsAborted(s)) {
        return absl::InternalError(s.message());
      }
      return s;
    }
    const std::string what = absl::StrCat("sql_function ", function);
    if (state == "57014") {
      return absl::DeadlineExceededError(
          absl::StrCat(what, " was canceled (SQLSTATE 57014)"));
    }
    return SqlErrorVerdict(e, what);
  } catch (...) {
    return StatusFromCurrentException("acknowledge");
  }
}

HandledAndAcked PgItemAcks::HandleAndAck(const ClaimRef& ref,
                                         const std::vector<std::string>& ids,
                                         const HandlerCall& handler,
                                         const CarriedClaim* carry,
                                         bool defer_alone) {
  HandledAndAcked r;
  if (Gone()) {
    HandledAndAcked r;
    r.error = GoneError();
    return r;
  }
  try {
    AckTransaction ack(db());
    r.verdict = RunHandler(handler, ack);
    if (!r.verdict.ok()) return r;  // rolls back as `ack` goes out of scope
    r.acking = true;
    r.ack_start = absl::Now();
    if (ack.started() && carry && carry->of_key) {
      // The key's next item is read by the ack's statement, in the
      // transaction, and taken only once it committed.
      AckedAndClaimed read = AckAndNextOfKey(ack.work(), ref, ids.front());
      r.deleted = read.acked;
      if (r.deleted == 1) {
        ack.work().commit();
        r.carried = std::move(read);
      }
    } else if (ack.started()) {
      r.deleted = DeleteClaimed(ack.work(), ref, ids);
      if (r.deleted == static_cast<int64_t>(ids.size())) ack.work().commit();
      // Otherwise the transaction rolls back as `ack` goes out of scope.
    } else if (defer_alone) {
      r.alone = true;
      r.deferred = true;
    } else if (carry) {
      r.alone = true;
      AckedAndClaimed read = AckCarrying(ref, ids, *carry);
      r.deleted = read.acked;
      r.carried = std::move(read);
    } else {
      r.alone = true;
      r.deleted = DeleteClaimedNow(db(), ref, ids);
    }
  } catch (...) {
    r.error = AckErrorOfCurrentException("");
  }
  return r;
}

absl::StatusOr<std::vector<bool>> PgItemAcks::DeleteOfTakes(
    const std::string& group, const std::vector<TakeItem>& items) {
  if (Gone()) return GoneError();
  try {
    if (items.size() == 1) {
      // Alone: the ack of one item, the cheapest statement.
      const TakeItem& item = items.front();
      const ClaimRef ref{group, item.session, item.part, item.epoch};
      return std::vector<bool>{DeleteClaimedNow(db(), ref, {item.id}) == 1};
    }
    return store::DeleteOfTakes(db(), group, items);
  } catch (...) {
    return AckErrorOfCurrentException("");
  }
}

absl::StatusOr<AckedAndClaimed> PgItemAcks::AckInFunction(
    const ClaimRef& ref, const std::vector<std::string>& ids,
    const CarriedClaim* carry) {
  // One autocommit statement: the fenced delete calls the function on the
  // items it deletes. Whatever it deleted is acknowledged, and handled.
  if (Gone()) return GoneError();
  try {
    if (carry && carry->of_key) {
      return AckInFunctionAndNextOfKey(db(), ref, ids.front());
    }
    AckedAndClaimed r;
    r.acked = function_.arrays ? AckInFunctionOnArrays(db(), ref, ids)
                               : store::AckInFunction(db(), ref, ids.front());
    return r;
  } catch (...) {
    return AckErrorOfCurrentException(function_.name);
  }
}

AckedAndClaimed PgItemAcks::AckCarrying(const ClaimRef& ref,
                                        const std::vector<std::string>& ids,
                                        const CarriedClaim& carry) {
  if (carry.runs) {
    return AckAndClaimRuns(db(), ref, ids, carry.from, carry.last, carry.limit,
                           *carry.pass_over, carry.continued);
  }
  if (carry.of_key) return AckAndNextOfKey(db(), ref, ids.front());
  return AckAndClaim(db(), ref, ids, carry.from, carry.last, carry.limit);
}

absl::StatusOr<int64_t> PgItemAcks::ReleaseForRetry(
    const ClaimRef& ref, const std::vector<std::string>& ids,
    const std::string& error, absl::Duration backoff, bool count_attempt) {
  if (Gone()) return GoneError();
  return store::ReleaseForRetry(db(), ref, ids, error, backoff, count_attempt);
}

absl::StatusOr<bool> PgItemAcks::DeadLetter(const ClaimRef& ref,
                                            const std::string& id,
                                            const std::string& error,
                                            bool count_attempt) {
  if (Gone()) return GoneError();
  return store::DeadLetter(db(), ref, id, error, count_attempt);
}

absl::StatusOr<std::map<std::string, int>> PgItemAcks::CountDeliveriesOfTheDead(
    const ClaimRef& ref, const std::vector<std::string>& ids,
    absl::Time died_at) {
  if (Gone()) return GoneError();
  return store::CountDeliveriesOfTheDead(db(), ref, ids, died_at);
}

absl::Status PgItemAcks::ReportCircuit(const std::string& session, bool open,
                                       const std::string& error) {
  if (Gone()) return GoneError();
  return store::ReportCircuit(db(), session, open, error);
}

absl::StatusOr<std::set<std::string>> PgItemAcks::StillDue(
    const ClaimRef& ref, const std::vector<std::string>& ids) {
  if (Gone()) return GoneError();
  return store::StillDue(db(), ref, ids);
}

}  // namespace sqlgroup::store
