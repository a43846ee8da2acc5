// Re-reading a claim before its items go to a handler. A claim writes
// nothing, so a pause or a cancel that commits after it cannot reach the
// items it read: a member that holds claimed items for a while (heads
// waiting for a free worker, the rest of a batch behind a slow handler)
// asks again before it hands one over (member/claim_freshness.h).
#ifndef SQLGROUP_STORE_STILL_DUE_H_
#define SQLGROUP_STORE_STILL_DUE_H_

#include <pqxx/connection>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "store/model.h"

namespace sqlgroup::store {

// Prepares StillDue's statement on a worker connection (from
// PrepareItemStatements). With `pauses` (schema 17) it reads the pauses.
void PrepareStillDue(pqxx::connection& conn, bool pauses);

// Which of `ids`, claimed under `ref`, may still go to a handler: waiting
// (not acknowledged, cancelled or dead-lettered meanwhile), due, and
// neither its group nor its key paused. Reads only; the take is not
// checked here, since the ack is fenced on it.
absl::StatusOr<std::set<std::string>> StillDue(
    pqxx::connection& conn, const ClaimRef& ref,
    const std::vector<std::string>& ids);

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_STILL_DUE_H_
