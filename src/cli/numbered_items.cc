#include "cli/numbered_items.h"

#include <limits>
#include <map>
#include <pqxx/pqxx>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sqlgroup/producer.h"

namespace sqlgroup::cli {
namespace {

// A PostgreSQL text[] literal: every element quoted, so any key text fits.
std::string TextArray(const std::map<std::string, int64_t>& tally) {
  std::vector<std::string> quoted;
  for (const auto& [key, n] : tally) {
    std::string q = "\"";
    for (const char c : key) {
      if (c == '"' || c == '\\') q += '\\';
      q += c;
    }
    quoted.push_back(q + "\"");
  }
  return absl::StrCat("{", absl::StrJoin(quoted, ","), "}");
}

std::string CountArray(const std::map<std::string, int64_t>& tally) {
  std::vector<std::string> counts;
  for (const auto& [key, n] : tally) counts.push_back(absl::StrCat(n));
  return absl::StrCat("{", absl::StrJoin(counts, ","), "}");
}

}  // namespace

std::string SequencedPayload(int64_t seq, size_t bytes) {
  std::string payload = absl::StrCat(seq);
  if (payload.size() < bytes) {
    payload += ' ';
    payload.resize(bytes, 'x');
  }
  return payload;
}

std::optional<int64_t> PayloadSequence(const std::string& payload) {
  if (payload.empty() || payload[0] < '0' || payload[0] > '9') {
    return std::nullopt;
  }
  int64_t seq = 0;
  for (const char c : payload) {
    if (c < '0' || c > '9') break;
    if (seq > (std::numeric_limits<int64_t>::max() - (c - '0')) / 10) {
      return std::nullopt;
    }
    seq = seq * 10 + (c - '0');
  }
  return seq;
}

std::vector<NewItem> NumberedItems(pqxx::work& tx,
                                   const std::vector<std::string>& keys,
                                   size_t payload_bytes) {
  std::map<std::string, int64_t> tally;
  for (const std::string& key : keys) ++tally[key];
  // One statement for the batch; rows are inserted (and so locked) in key
  // order, the same in every producer, so two producers never deadlock.
  // Each key's tally after the batch comes back; the batch's numbers are
  // the ones just below it.
  std::map<std::string, int64_t> next;
  for (const pqxx::row& row : tx.exec_params(
           "INSERT INTO sqlgroup_demo.produced (key, n) "
           "SELECT t.key, t.n FROM unnest($1::text[], $2::bigint[]) "
           "  AS t(key, n) ORDER BY t.key "
           "ON CONFLICT (key) DO UPDATE SET n = produced.n + EXCLUDED.n "
           "RETURNING key, n",
           TextArray(tally), CountArray(tally))) {
    const std::string key = row[0].as<std::string>();
    next[key] = row[1].as<int64_t>() - tally[key];
  }
  std::vector<NewItem> items(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    items[i].key = keys[i];
    items[i].payload = SequencedPayload(++next[keys[i]], payload_bytes);
  }
  return items;
}

absl::StatusOr<std::vector<std::string>> EnqueueNumbered(
    pqxx::work& tx, const std::string& group,
    const std::vector<std::string>& keys, size_t payload_bytes,
    const EnqueueOptions& options) {
  return Producer::EnqueueIn(tx, group, NumberedItems(tx, keys, payload_bytes),
                             options);
}

}  // namespace sqlgroup::cli
