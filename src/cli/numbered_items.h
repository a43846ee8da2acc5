// Keyed items numbered per key, so that order can be proved from the
// database: `produce --keys` and the demo give item n of key kX a payload
// that begins with n, and the `count` handler and the chaos checker read it
// back.
//
// Payload format: the decimal sequence number of the item within its key
// (1, 2, 3, ... over every producer that ever tallied the key in
// sqlgroup_demo.produced), then, when the payload is to be longer, one
// space and 'x' up to the requested size:
//
//   SequencedPayload(7, 16) == "7 xxxxxxxxxxxxxx"
//   SequencedPayload(12345, 3) == "12345"  (the number is never cut)
//
// Thread safety: pure functions, plus EnqueueNumbered which is as safe as
// the transaction given to it.
#ifndef SQLGROUP_CLI_NUMBERED_ITEMS_H_
#define SQLGROUP_CLI_NUMBERED_ITEMS_H_

#include <cstdint>
#include <optional>
#include <pqxx/transaction>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sqlgroup/producer.h"

namespace sqlgroup::cli {

// Item `seq` of its key, padded to `bytes` (see the format above).
std::string SequencedPayload(int64_t seq, size_t bytes);

// The sequence number a payload begins with; nullopt when it does not begin
// with a decimal digit (an unnumbered item) or the number overflows.
std::optional<int64_t> PayloadSequence(const std::string& payload);

// One item per entry of `keys` (in that order, which is each key's enqueue
// order), numbered per key inside `tx`: adds the batch's count of each key
// to sqlgroup_demo.produced and numbers the key's items from the tally it
// had before, read in `tx` (the upsert locks the key's row, so producers
// of one key take turns and never share a number). Each payload is
// SequencedPayload(n, payload_bytes). Send them in `tx`. Throws what pqxx
// throws.
std::vector<sqlgroup::NewItem> NumberedItems(
    pqxx::work& tx, const std::vector<std::string>& keys, size_t payload_bytes);

// NumberedItems enqueued into `group` in `tx`: their ids, in the order of
// `keys`; the errors of Producer::EnqueueIn.
absl::StatusOr<std::vector<std::string>> EnqueueNumbered(
    pqxx::work& tx, const std::string& group,
    const std::vector<std::string>& keys, size_t payload_bytes,
    const sqlgroup::EnqueueOptions& options = {});

}  // namespace sqlgroup::cli

#endif  // SQLGROUP_CLI_NUMBERED_ITEMS_H_
