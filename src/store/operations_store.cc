#include "store/operations_store.h"

#include <pqxx/pqxx>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "store/claim_sql.h"
#include "store/connection.h"
#include "store/errors.h"
#include "store/interval.h"
#include "store/member_store.h"

namespace sqlgroup::store {
namespace {

absl::Time TimeAt(const pqxx::field& f) {
  return absl::FromUnixMicros(f.as<int64_t>());
}

std::optional<std::string> OptionalText(const pqxx::field& f) {
  if (f.is_null()) return std::nullopt;
  return f.as<std::string>();
}

std::string Bytes(const pqxx::field& f) {
  std::string bytes;
  ReadBytea(f, &bytes);
  return bytes;
}

// A parameter that may be NULL: the value and whether it is given; the
// statement reads `CASE WHEN $given THEN $value END`.
std::string Given(int value, int given, const std::string& type) {
  return absl::StrCat("CASE WHEN $", given, " THEN $", value, "::", type,
                      " END");
}

// Runs `f` in a transaction on `db` and maps its errors for a person:
// `what` says what was being done ("requeue the dead letters of g");
// `schema` is the first that has the operation's function.
template <typename T, typename F>
absl::StatusOr<T> Operate(DbConnection& db, const std::string& what, F&& f,
                          int schema = 17) {
  try {
    pqxx::work tx(PqxxOf(db));
    T out = f(tx);
    tx.commit();
    return out;
  } catch (const pqxx::sql_error& e) {
    const std::string state = SqlStateOf(e);
    const std::string message = PrimaryMessage(e);
    if (state == "P0002") return absl::NotFoundError(message);
    if (state == "22023") return absl::InvalidArgumentError(message);
    if (state == "42883") {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot ", what, ": the database's sqlgroup schema is older than ",
          schema,
          ", which brings it; run `sqlgroup migrate` first "
          "(docs/UPGRADING.md)"));
    }
    if (state == "42501" && absl::StrContains(message, "`sqlgroup grant --")) {
      // sqlgroup.require_grant's sentence names the role, the group and
      // the command already (schema 19).
      return absl::PermissionDeniedError(
          absl::StrCat("cannot ", what, ": ", message));
    }
    if (state == "42501") {
      return absl::PermissionDeniedError(absl::StrCat(
          "cannot ", what, ": the connection's role may not (", message,
          "); the schema's owner can allow it with `sqlgroup grant "
          "--operator_role ROLE`"));
    }
    return StatusFromCurrentException(what);
  } catch (...) {
    return StatusFromCurrentException(what);
  }
}

const std::string& DeadColumns() {
  static const std::string* const kColumns = new std::string(absl::StrCat(
      "d.id::text, d.key, d.attempts, ", MicrosOf("d.enqueued_at"), ", ",
      MicrosOf("d.died_at"), ", coalesce(d.last_error, '')"));
  return *kColumns;
}

DeadItem DeadItemOf(const pqxx::row& row) {
  DeadItem d;
  d.id = row[0].as<std::string>();
  d.key = OptionalText(row[1]);
  d.attempts = row[2].as<int>();
  d.enqueued_at = TimeAt(row[3]);
  d.died_at = TimeAt(row[4]);
  d.last_error = row[5].as<std::string>();
  return d;
}

// The columns WaitingItemOf reads, of `i` (items_list or items_show),
// with `bytes` and `payload` the payload's size and bytes.
std::string WaitingColumns(const std::string& bytes,
                           const std::string& payload) {
  return absl::StrCat(
      "i.id::text, i.key, i.part, i.attempts, ", MicrosOf("i.due_at"), ", ",
      MicrosOf("i.enqueued_at"), ", ", bytes, ", ", payload,
      ", coalesce(i.last_error, ''), ", MicrosOf("i.requeued_at"));
}

WaitingItem WaitingItemOf(const pqxx::row& row) {
  WaitingItem w;
  w.id = row[0].as<std::string>();
  w.key = OptionalText(row[1]);
  w.part = row[2].as<int>();
  w.attempts = row[3].as<int>();
  w.due_at = TimeAt(row[4]);
  w.enqueued_at = TimeAt(row[5]);
  w.payload_bytes = row[6].as<int64_t>();
  w.payload = Bytes(row[7]);
  w.last_error = row[8].as<std::string>();
  if (!row[9].is_null()) w.requeued_at = TimeAt(row[9]);
  return w;
}

}  // namespace

absl::StatusOr<std::vector<DeadItem>> ListDead(DbConnection& db,
                                               const std::string& group,
                                               const DeadFilter& filter) {
  const std::string sql = absl::StrCat(
      "SELECT ", DeadColumns(),
      ", d.waiting_after FROM sqlgroup.dead_list($1, ", Given(2, 3, "text"),
      ", nullif($4, ''), ",
      "CASE WHEN $6 THEN to_timestamp($5::bigint / 1000000.0) END, $7) d");
  return Operate<std::vector<DeadItem>>(
      db, absl::StrCat("list the dead letters of ", group),
      [&](pqxx::work& tx) {
        std::vector<DeadItem> out;
        for (const pqxx::row& row : tx.exec_params(
                 sql, group, filter.key.value_or(""), filter.key.has_value(),
                 filter.error,
                 filter.since ? absl::ToUnixMicros(*filter.since) : 0,
                 filter.since.has_value(), filter.limit)) {
          DeadItem d = DeadItemOf(row);
          if (!row[6].is_null()) d.waiting_after = row[6].as<int64_t>();
          out.push_back(std::move(d));
        }
        return out;
      });
}

absl::StatusOr<DeadItem> ShowDead(DbConnection& db, const std::string& group,
                                  const std::string& id) {
  const std::string sql =
      absl::StrCat("SELECT ", DeadColumns(),
                   ", d.payload "
                   "FROM sqlgroup.dead_show($1, $2::uuid) d");
  return Operate<DeadItem>(
      db, absl::StrCat("show dead letter ", id, " of ", group),
      [&](pqxx::work& tx) {
        const pqxx::row row = tx.exec_params1(sql, group, id);
        DeadItem d = DeadItemOf(row);
        d.payload = Bytes(row[6]);
        return d;
      });
}

absl::StatusOr<std::vector<RequeuedItem>> RequeueDead(
    DbConnection& db, const std::string& group, const DeadSelection& selection,
    RequeuePosition position, bool dry_run) {
  const std::string sql = absl::StrCat(
      "SELECT r.id::text, r.new_id::text, r.key FROM "
      "sqlgroup.dead_requeue($1, ",
      Given(2, 3, "uuid[]"), ", ", Given(4, 5, "text"),
      ", nullif($6, ''), $7, $8, $9) r");
  return Operate<std::vector<RequeuedItem>>(
      db, absl::StrCat("requeue the dead letters of ", group),
      [&](pqxx::work& tx) {
        std::vector<RequeuedItem> out;
        for (const pqxx::row& row : tx.exec_params(
                 sql, group, SqlArray(selection.ids), !selection.ids.empty(),
                 selection.key.value_or(""), selection.key.has_value(),
                 selection.error, selection.all,
                 std::string(RequeuePositionName(position)), dry_run)) {
          RequeuedItem r;
          r.id = row[0].as<std::string>();
          r.new_id = row[1].as<std::string>();
          r.key = OptionalText(row[2]);
          out.push_back(std::move(r));
        }
        return out;
      });
}

absl::StatusOr<std::vector<DeadItem>> PurgeDead(DbConnection& db,
                                                const std::string& group,
                                                const DeadSelection& selection,
                                                bool dry_run) {
  const std::string sql = absl::StrCat(
      "SELECT p.id::text, p.key, ", MicrosOf("p.died_at"),
      " FROM sqlgroup.dead_purge($1, ", Given(2, 3, "uuid[]"), ", ",
      Given(4, 5, "text"), ", ", Given(6, 7, "interval"), ", $8, $9) p");
  return Operate<std::vector<DeadItem>>(
      db, absl::StrCat("purge the dead letters of ", group),
      [&](pqxx::work& tx) {
        std::vector<DeadItem> out;
        for (const pqxx::row& row : tx.exec_params(
                 sql, group, SqlArray(selection.ids), !selection.ids.empty(),
                 selection.key.value_or(""), selection.key.has_value(),
                 ToInterval(
                     selection.older_than.value_or(absl::ZeroDuration())),
                 selection.older_than.has_value(), selection.all, dry_run)) {
          DeadItem d;
          d.id = row[0].as<std::string>();
          d.key = OptionalText(row[1]);
          d.died_at = TimeAt(row[2]);
          out.push_back(std::move(d));
        }
        return out;
      });
}

absl::StatusOr<std::vector<WaitingItem>> ListItems(DbConnection& db,
                                                   const std::string& group,
                                                   const ItemFilter& filter) {
  const std::string sql = absl::StrCat(
      "SELECT ", WaitingColumns("i.payload_bytes", "i.payload_preview"),
      " FROM sqlgroup.items_list($1, ", Given(2, 3, "text"), ", ",
      Given(4, 5, "integer"), ", $6) i");
  return Operate<std::vector<WaitingItem>>(
      db, absl::StrCat("list the items of ", group), [&](pqxx::work& tx) {
        std::vector<WaitingItem> out;
        for (const pqxx::row& row :
             tx.exec_params(sql, group, filter.key.value_or(""),
                            filter.key.has_value(), filter.part.value_or(0),
                            filter.part.has_value(), filter.limit)) {
          out.push_back(WaitingItemOf(row));
        }
        return out;
      });
}

absl::StatusOr<WaitingItem> ShowItem(DbConnection& db, const std::string& group,
                                     const std::string& id) {
  const std::string sql = absl::StrCat(
      "SELECT ", WaitingColumns("octet_length(i.payload)", "i.payload"),
      " FROM sqlgroup.items_show($1, $2::uuid) i");
  return Operate<WaitingItem>(
      db, absl::StrCat("show item ", id, " of ", group), [&](pqxx::work& tx) {
        return WaitingItemOf(tx.exec_params1(sql, group, id));
      });
}

absl::StatusOr<std::vector<CancelledItem>> CancelItems(
    DbConnection& db, const std::string& group, const ItemSelection& selection,
    bool dry_run) {
  const std::string sql = absl::StrCat(
      "SELECT c.id::text, c.key, c.part, c.attempts, c.may_be_running "
      "FROM sqlgroup.items_cancel($1, ",
      Given(2, 3, "uuid[]"), ", ", Given(4, 5, "text"), ", $6) c");
  return Operate<std::vector<CancelledItem>>(
      db, absl::StrCat("cancel items of ", group),
      [&](pqxx::work& tx) {
        std::vector<CancelledItem> out;
        for (const pqxx::row& row :
             tx.exec_params(sql, group, SqlArray(selection.ids),
                            !selection.ids.empty(), selection.key.value_or(""),
                            selection.key.has_value(), dry_run)) {
          CancelledItem c;
          c.id = row[0].as<std::string>();
          c.key = OptionalText(row[1]);
          c.part = row[2].as<int>();
          c.attempts = row[3].as<int>();
          c.may_be_running = row[4].as<bool>();
          out.push_back(std::move(c));
        }
        return out;
      },
      /*schema=*/18);
}

absl::StatusOr<bool> SetPaused(DbConnection& db, const std::string& group,
                               const std::optional<std::string>& key,
                               bool pause) {
  const std::string sql =
      absl::StrCat("SELECT sqlgroup.", pause ? "pause" : "resume", "($1, ",
                   Given(2, 3, "text"), ")");
  return Operate<bool>(
      db,
      absl::StrCat(pause ? "pause " : "resume ",
                   key ? absl::StrCat("key '", *key, "' of ") : "", "group ",
                   group),
      [&](pqxx::work& tx) {
        return tx.exec_params1(sql, group, key.value_or(""), key.has_value())[0]
            .as<bool>();
      });
}

}  // namespace sqlgroup::store
