#include "store/describe_store.h"

#include <pqxx/pqxx>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "keyspace.h"
#include "store/connection.h"
#include "store/errors.h"
#include "store/interval.h"
#include "store/item_store.h"

namespace sqlgroup::store {
namespace {

// One snapshot for every statement below.
constexpr char kSnapshot[] =
    "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY";

// $1 group. Its sessions in id order: id, instance ('' for none), host,
// pid, created_at (microseconds since the epoch), time since the last
// heartbeat, expired, static timeout, time left away, connections and
// budget, how long the circuit has been open and its error, and with
// `versions` (schema 14 on) the member's release and schema. Durations in
// microseconds; NULL where the session has none.
std::string MembersSql(bool versions) {
  return absl::StrCat(
      "SELECT s.id::text, coalesce(s.instance, ''), s.host, s.pid, "
      "  (extract(epoch from s.created_at) * 1000000)::bigint, ",
      MicrosOf("clock_timestamp() - s.heartbeated_at"),
      ", s.heartbeated_at <= clock_timestamp() - g.session_ttl "
      "  AND coalesce(s.away_until, '-infinity') <= clock_timestamp(), ",
      MicrosOf("s.static_timeout"), ", ",
      MicrosOf("s.away_until - clock_timestamp()"),
      ", s.connections, s.connection_budget, ",
      MicrosOf("clock_timestamp() - s.circuit_open_since"),
      ", coalesce(s.circuit_error, ''), ",
      versions ? "coalesce(s.member_version, ''), coalesce(s.member_schema, 0)"
               : "'', 0",
      " FROM sqlgroup.sessions s "
      "JOIN sqlgroup.groups g ON g.name = s.group_name "
      "WHERE s.group_name = $1 ORDER BY s.id");
}

// $1 group. Its last part count change: the count before (NULL: never
// changed), when (microseconds since the epoch), and how many parts of
// another count than the current one are still owned.
constexpr char kLastPartsChange[] =
    "SELECT g.previous_parts, (extract(epoch from g.parts_changed_at) * "
    "1000000)::bigint, (SELECT count(*) FROM sqlgroup.session_parts p "
    "  WHERE p.group_name = g.name AND p.parts_of <> g.parts) "
    "FROM sqlgroup.groups g WHERE g.name = $1";

// $1 group, $2 its part count. The parts owned under that count: part,
// owner session, epoch, and how long it has been handed over
// (microseconds; NULL when it is not).
const std::string& OwnersSql() {
  static const std::string* const kSql = new std::string(
      absl::StrCat("SELECT part, session_id::text, epoch, ",
                   MicrosOf("clock_timestamp() - revoking_since"),
                   " FROM sqlgroup.session_parts "
                   "WHERE group_name = $1 AND parts_of = $2 ORDER BY part"));
  return *kSql;
}

// $1 group, $2 part numbers (int[]), $3 their first keys and $4 their last
// keys (uuid[]). Per part: its waiting items, and the oldest one's age in
// microseconds (0 when none wait).
const std::string& LagSql() {
  static const std::string* const kSql = new std::string(
      absl::StrCat("SELECT b.part, count(i.id), "
                   "  coalesce(",
                   MicrosOf("clock_timestamp() - min(i.enqueued_at)"),
                   ", 0) "
                   "FROM unnest($2::int[], $3::uuid[], $4::uuid[]) "
                   "  AS b(part, lo, hi) "
                   "LEFT JOIN sqlgroup.items i ON i.group_name = $1 "
                   "  AND i.id BETWEEN b.lo AND b.hi "
                   "GROUP BY b.part"));
  return *kSql;
}

// $1 group. How many of its items are dead-lettered.
constexpr char kDeadItems[] =
    "SELECT count(*) FROM sqlgroup.dead_items WHERE group_name = $1";

// $1 group. Its pauses (schema 17 on), the whole group's first: the key
// (NULL for the group), when, microseconds since the epoch, and by whom.
const std::string& PausesSql() {
  static const std::string* const kSql = new std::string(absl::StrCat(
      "SELECT key, ", MicrosOf("paused_at"),
      ", paused_by FROM sqlgroup.pauses WHERE group_name = $1 ORDER BY block"));
  return *kSql;
}

// "{a,b,c}": a PostgreSQL array literal of plain tokens.
template <typename Range, typename F>
std::string ArrayLiteral(const Range& values, F&& format) {
  std::vector<std::string> parts;
  for (const auto& v : values) parts.push_back(format(v));
  return absl::StrCat("{", absl::StrJoin(parts, ","), "}");
}

MemberInfo MemberFrom(const pqxx::row& row) {
  MemberInfo m;
  m.session_id = row[0].as<std::string>();
  m.instance = row[1].as<std::string>();
  m.host = row[2].as<std::string>();
  m.pid = row[3].as<int>();
  m.created_at = absl::FromUnixMicros(row[4].as<int64_t>());
  m.since_heartbeat = absl::Microseconds(row[5].as<int64_t>());
  m.expired = row[6].as<bool>();
  if (!row[7].is_null()) {
    m.static_timeout = absl::Microseconds(row[7].as<int64_t>());
  }
  if (!row[8].is_null() && row[8].as<int64_t>() > 0) {
    m.away_left = absl::Microseconds(row[8].as<int64_t>());
  }
  if (!row[9].is_null()) m.connections = row[9].as<int>();
  if (!row[10].is_null()) m.connection_budget = row[10].as<int>();
  if (!row[11].is_null()) {
    m.circuit_open_for = absl::Microseconds(row[11].as<int64_t>());
    m.circuit_error = row[12].as<std::string>();
  }
  m.version = row[13].as<std::string>();
  m.schema = row[14].as<int>();
  return m;
}

}  // namespace

absl::StatusOr<GroupDescription> DescribeGroup(
    DbConnection& db, const GroupConfig& config, bool count_lag,
    const internal::SchemaState& schema) {
  GroupDescription d;
  d.config = config;
  d.schema_version = schema.version;
  d.members_from = schema.members_from;
  const std::string& name = config.name;
  const int parts = config.parts;
  d.parts.resize(parts);
  std::vector<int> numbers(parts);
  for (int p = 0; p < parts; ++p) {
    numbers[p] = p;
    const KeyRange r = PartRange(p, parts);
    d.parts[p].part = p;
    d.parts[p].first_key = FormatUuid(r.first);
    d.parts[p].last_key = FormatUuid(r.last);
  }
  absl::Status s = Guard("describe group", [&] {
    pqxx::work tx(PqxxOf(db), "describe");
    tx.exec(kSnapshot);
    for (const pqxx::row& row : tx.exec_params(
             MembersSql(schema.version >= internal::kVersionsRecordedFrom),
             name)) {
      d.members.push_back(MemberFrom(row));
    }
    const pqxx::row change = tx.exec_params1(kLastPartsChange, name);
    if (!change[0].is_null()) {
      d.last_parts_change = PartsChange{
          change[0].as<int>(), parts,
          absl::FromUnixMicros(change[1].as<int64_t>()), change[2].as<int>()};
    }
    for (const pqxx::row& row : tx.exec_params(OwnersSql(), name, parts)) {
      const int p = row[0].as<int>();
      if (p < 0 || p >= parts) continue;
      PartInfo& info = d.parts[p];
      info.owner_session = row[1].as<std::string>();
      info.epoch = row[2].as<int64_t>();
      if (!row[3].is_null()) {
        info.revoking_for = absl::Microseconds(row[3].as<int64_t>());
      }
      for (MemberInfo& m : d.members) {
        if (m.session_id == info.owner_session) {
          m.parts.push_back(p);
          info.owner_instance = m.instance;
        }
      }
    }
    if (count_lag) {
      const auto first =
          ArrayLiteral(d.parts, [](const PartInfo& i) { return i.first_key; });
      const auto last =
          ArrayLiteral(d.parts, [](const PartInfo& i) { return i.last_key; });
      const auto nums =
          ArrayLiteral(numbers, [](int p) { return absl::StrCat(p); });
      for (const pqxx::row& row :
           tx.exec_params(LagSql(), name, nums, first, last)) {
        PartInfo& info = d.parts[row[0].as<int>()];
        info.waiting_items = row[1].as<int64_t>();
        info.oldest_age = absl::Microseconds(row[2].as<int64_t>());
      }
    }
    if (config.ordering == Ordering::kKey) {
      std::vector<KeyRange> ranges;
      for (int p = 0; p < parts; ++p) ranges.push_back(PartRange(p, parts));
      for (const PartBlockedRow& row :
           CountBlocked(tx, name, numbers, ranges)) {
        PartInfo& info = d.parts[row.part];
        info.blocked_keys = row.keys;
        info.oldest_blocked_age = row.oldest;
      }
    }
    d.dead_items = tx.exec_params1(kDeadItems, name)[0].as<int64_t>();
    if (schema.version >= internal::kPausesFrom) {
      for (const pqxx::row& row : tx.exec_params(PausesSql(), name)) {
        Pause p;
        if (!row[0].is_null()) p.key = row[0].as<std::string>();
        p.paused_at = absl::FromUnixMicros(row[1].as<int64_t>());
        p.paused_by = row[2].as<std::string>();
        d.pauses.push_back(std::move(p));
      }
    }
    tx.commit();
  });
  if (!s.ok()) return s;
  return d;
}

}  // namespace sqlgroup::store
