#include "support/db_snapshot.h"

#include <exception>
#include <pqxx/pqxx>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace sqlgroup::testing {

std::string DatabaseSnapshot(const std::string& dsn) {
  std::string out;
  try {
    pqxx::connection conn(dsn);
    pqxx::work tx(conn);
    tx.exec("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY");
    constexpr char kUserSchemas[] =
        "NOT IN ('pg_catalog', 'information_schema', 'pg_toast')";
    for (const auto& row : tx.exec(absl::StrCat(
             "SELECT nspname FROM pg_namespace WHERE nspname ", kUserSchemas,
             " AND nspname NOT LIKE 'pg_temp%' AND nspname NOT LIKE "
             "'pg_toast_temp%' ORDER BY 1"))) {
      absl::StrAppend(&out, "schema ", row[0].c_str(), "\n");
    }
    for (const auto& row : tx.exec(absl::StrCat(
             "SELECT table_schema || '.' || table_name || '.' || column_name "
             "|| ' ' || data_type FROM information_schema.columns WHERE "
             "table_schema ",
             kUserSchemas, " ORDER BY 1"))) {
      absl::StrAppend(&out, "column ", row[0].c_str(), "\n");
    }
    for (const auto& table : tx.exec(absl::StrCat(
             "SELECT quote_ident(schemaname) || '.' || quote_ident(tablename) "
             "FROM pg_tables WHERE schemaname ",
             kUserSchemas, " ORDER BY 1"))) {
      const std::string name = table[0].c_str();
      for (const auto& row : tx.exec(
               absl::StrCat("SELECT t::text FROM ", name, " t ORDER BY 1"))) {
        absl::StrAppend(&out, name, " ", row[0].c_str(), "\n");
      }
    }
    for (const auto& seq : tx.exec(absl::StrCat(
             "SELECT quote_ident(schemaname) || '.' || "
             "quote_ident(sequencename)"
             ", coalesce(last_value, 0) FROM pg_sequences WHERE schemaname ",
             kUserSchemas, " ORDER BY 1"))) {
      absl::StrAppend(&out, "sequence ", seq[0].c_str(), " ", seq[1].c_str(),
                      "\n");
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "snapshot of " << dsn << ": " << e.what();
  }
  return out;
}

}  // namespace sqlgroup::testing
