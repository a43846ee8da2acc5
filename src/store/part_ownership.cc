// The statements on the parts a session owns: take, drop, mark as
// being handed over, and trim their history (declared in member_store.h).
#include <pqxx/pqxx>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "store/connection.h"
#include "store/errors.h"
#include "store/interval.h"
#include "store/member_store.h"
#include "store/session_sql.h"
#include "store/statements.h"

namespace sqlgroup::store {
namespace {

// SQL true when part `a` of `a_parts` and part `b` of `b_parts` share a
// key: sqlgroup::RangesOverlap (keyspace.h), in SQL.
std::string RangesOverlapSql(const std::string& a, const std::string& a_parts,
                             const std::string& b, const std::string& b_parts) {
  return absl::StrCat("(", a, " * ", b_parts, " < (", b, " + 1) * ", a_parts,
                      " AND ", b, " * ", a_parts, " < (", a, " + 1) * ",
                      b_parts, ")");
}

}  // namespace

absl::StatusOr<std::vector<Owner>> TakeParts(pqxx::connection& conn,
                                             const std::string& group,
                                             const std::string& session,
                                             const std::vector<int>& parts,
                                             int parts_of) {
  return GuardOr<std::vector<Owner>>("take parts", [&] {
    pqxx::work tx(conn);
    LocalLimits(tx);
    std::vector<Owner> taken;
    std::vector<int> taken_parts;
    std::vector<int64_t> taken_epochs;
    for (const pqxx::row& row : tx.exec_params(
             absl::StrCat(
                 "INSERT INTO sqlgroup.session_parts "
                 "  (group_name, part, session_id, parts_of) "
                 "SELECT $1, p, $2::uuid, $4 FROM unnest($3::int[]) AS p "
                 "WHERE EXISTS (SELECT 1 FROM sqlgroup.sessions s "
                 "  JOIN sqlgroup.groups g ON g.name = s.group_name "
                 "  WHERE s.id = $2::uuid AND g.parts = $4 AND ",
                 kAlive,
                 ") AND NOT EXISTS (SELECT 1 FROM sqlgroup.session_parts o "
                 "  WHERE o.group_name = $1 AND o.parts_of <> $4 AND ",
                 RangesOverlapSql("o.part", "o.parts_of", "p", "$4"),
                 ") ON CONFLICT (group_name, parts_of, part) DO NOTHING "
                 "RETURNING part, epoch"),
             group, session, SqlArray(parts), parts_of)) {
      taken.push_back({row[0].as<int>(), session, row[1].as<int64_t>()});
      taken_parts.push_back(taken.back().part);
      taken_epochs.push_back(taken.back().epoch);
    }
    if (!taken.empty()) {
      // A separate statement: its clock_timestamp() is read after the
      // insert above has waited out any release of these parts.
      tx.exec_params(
          "INSERT INTO sqlgroup.ownership_log "
          "  (group_name, part, epoch, session_id, parts_of) "
          "SELECT $1, t.part, t.epoch, $2::uuid, $5 "
          "FROM unnest($3::int[], $4::bigint[]) AS t(part, epoch)",
          group, session, SqlArray(taken_parts), SqlArray(taken_epochs),
          parts_of);
      // The previous take of each part under this part count: did it end
      // with its owner dead? (PK order: the newest epoch before ours.)
      std::map<int, Owner*> by_part;
      for (Owner& o : taken) by_part[o.part] = &o;
      for (const pqxx::row& row : tx.exec_params(
               absl::StrCat(
                   "SELECT t.part, ", MicrosOf("l.released_at"),
                   " FROM unnest($2::int[], $3::bigint[]) AS t(part, epoch) "
                   "CROSS JOIN LATERAL (SELECT released_at, released_by "
                   "  FROM sqlgroup.ownership_log l WHERE l.group_name = $1 "
                   "  AND l.part = t.part AND l.epoch < t.epoch AND "
                   "  l.parts_of = $4 ORDER BY l.epoch DESC LIMIT 1) l "
                   "WHERE l.released_by IN ('reap', 'replaced', 'fenced')"),
               group, SqlArray(taken_parts), SqlArray(taken_epochs),
               parts_of)) {
        by_part.at(row[0].as<int>())->predecessor_died_at =
            absl::FromUnixMicros(row[1].as<int64_t>());
      }
    }
    tx.commit();
    return taken;
  });
}

absl::StatusOr<std::vector<int>> DropParts(
    pqxx::connection& conn, const std::string& group,
    const std::string& session, const std::vector<int>& parts, int parts_of,
    bool notify, const std::vector<std::string>& wake) {
  return GuardOr<std::vector<int>>("drop parts", [&] {
    pqxx::work tx(conn);
    LocalLimits(tx);
    std::vector<int> dropped;
    std::vector<int64_t> epochs;
    for (const pqxx::row& row : tx.exec_params(
             "DELETE FROM sqlgroup.session_parts WHERE group_name = $1 "
             "AND session_id = $2::uuid AND part = ANY($3::int[]) "
             "AND parts_of = $4 RETURNING part, epoch",
             group, session, SqlArray(parts), parts_of)) {
      dropped.push_back(row[0].as<int>());
      epochs.push_back(row[1].as<int64_t>());
    }
    if (!dropped.empty()) {
      tx.exec_params(
          "UPDATE sqlgroup.ownership_log SET released_at = clock_timestamp(), "
          "released_by = 'drop' WHERE session_id = $1::uuid "
          "AND released_at IS NULL AND epoch = ANY($2::bigint[])",
          session, SqlArray(epochs));
    }
    if (!dropped.empty() && notify && !wake.empty()) {
      tx.exec_params(absl::StrCat("SELECT pg_notify('", SessionChannel(""),
                                  "' || w, $2) FROM unnest($1::uuid[]) AS w"),
                     SqlArray(wake), kPartsFreed);
    }
    tx.commit();
    return dropped;
  });
}

absl::Status MarkRevoking(pqxx::connection& conn, const std::string& group,
                          const std::string& session,
                          const std::vector<int>& parts, int parts_of,
                          bool revoking) {
  return Guard("mark parts as being handed over", [&] {
    pqxx::nontransaction tx(conn);
    // $1 group, $2 session, $3 parts (int[]), $4 their part count, $5
    // whether they are being handed over. Rows already so are not written.
    tx.exec_params(
        "UPDATE sqlgroup.session_parts SET revoking_since = CASE WHEN $5 "
        "THEN clock_timestamp() END WHERE group_name = $1 AND session_id = "
        "$2::uuid AND part = ANY($3::int[]) AND parts_of = $4 AND "
        "(revoking_since IS NULL) = $5",
        group, session, SqlArray(parts), parts_of, revoking);
  });
}

absl::StatusOr<int64_t> PruneOwnershipLog(pqxx::connection& conn,
                                          const std::string& group,
                                          absl::Duration retention, int limit) {
  return GuardOr<int64_t>("prune ownership log", [&] {
    pqxx::work tx(conn);
    LocalLimits(tx);
    const int64_t n =
        tx.exec_params(
              "DELETE FROM sqlgroup.ownership_log WHERE group_name = $1 "
              "AND (part, epoch) IN (SELECT part, epoch "
              "  FROM sqlgroup.ownership_log WHERE group_name = $1 "
              "  AND released_at < clock_timestamp() - $2::interval "
              "  ORDER BY released_at LIMIT $3)",
              group, ToInterval(retention), limit)
            .affected_rows();
    tx.commit();
    return n;
  });
}

}  // namespace sqlgroup::store
