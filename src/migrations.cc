#include "migrations.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "schema_skew.h"

namespace sqlgroup::internal {
namespace {

bool LooksLikeMigration(const std::string& name) {
  return name.size() > 8 && std::isdigit(name[0]) && std::isdigit(name[1]) &&
         std::isdigit(name[2]) && name[3] == '_' &&
         name.substr(name.size() - 4) == ".sql";
}

constexpr char kMembersFrom[] = "-- members-from:";

// The N of a "-- members-from: N" line; nullopt when there is none, -1
// when the line does not hold a number.
std::optional<int> MembersFromLine(const std::string& sql) {
  const size_t at = sql.find(kMembersFrom);
  if (at == std::string::npos || (at > 0 && sql[at - 1] != '\n')) {
    return std::nullopt;
  }
  const size_t start = at + sizeof(kMembersFrom) - 1;
  const size_t end = sql.find('\n', start);
  int n = 0;
  if (!absl::SimpleAtoi(
          sql.substr(start, end == std::string::npos ? end : end - start),
          &n)) {
    return -1;
  }
  return n;
}

// Fills members_from and checks it (see ParseMigrations).
absl::Status ReadMembersFrom(std::vector<Migration>& migrations) {
  int previous = 0;
  for (Migration& m : migrations) {
    const std::optional<int> line = MembersFromLine(m.sql);
    if (!line) {
      if (m.version >= kVersionsRecordedFrom) {
        return absl::InvalidArgumentError(absl::StrCat(
            "migration '", m.name, "' has no \"-- members-from: N\" line: ",
            "say which members may run against it (N = ", m.version - 1,
            " if members of the release before still work, ", m.version,
            " if they must stop; docs/UPGRADING.md)"));
      }
      m.members_from = m.version;
    } else if (*line < previous || *line > m.version) {
      return absl::InvalidArgumentError(
          absl::StrCat("migration '", m.name, "' says \"-- members-from\" ",
                       *line < 0 ? "without a number" : absl::StrCat(*line),
                       ": it must be a schema version from ", previous,
                       " (the previous "
                       "migration's) to ",
                       m.version));
    } else {
      m.members_from = *line;
    }
    previous = m.members_from;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<Migration>> ParseMigrations(
    const std::vector<MigrationSource>& sources) {
  std::vector<Migration> out;
  for (const MigrationSource& s : sources) {
    int version = 0;
    if (!LooksLikeMigration(s.name) ||
        !absl::SimpleAtoi(s.name.substr(0, 3), &version)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "migration file name '", s.name, "' is not NNN_name.sql"));
    }
    out.push_back({version, s.name, s.sql});
  }
  std::sort(out.begin(), out.end(), [](const Migration& a, const Migration& b) {
    return a.version < b.version;
  });
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].version != static_cast<int>(i) + 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "migration '", out[i].name, "' should be numbered ", i + 1,
          ": versions must run 1, 2, 3... without gaps "
          "or duplicates"));
    }
  }
  if (absl::Status s = ReadMembersFrom(out); !s.ok()) return s;
  return out;
}

absl::StatusOr<std::vector<MigrationSource>> ReadMigrationDir(
    const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat(
        "migrations folder '", dir,
        "' does not exist; pass the sql/ folder of the sqlgroup sources, or "
        "leave --migrations-dir out to use the migrations built in"));
  }
  std::vector<MigrationSource> out;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || !LooksLikeMigration(name)) continue;
    std::ifstream in(e.path());
    std::stringstream text;
    text << in.rdbuf();
    if (!in) {
      return absl::InternalError(
          absl::StrCat("cannot read migration ", e.path().string()));
    }
    out.push_back({name, text.str()});
  }
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot list '", dir, "': ", ec.message()));
  }
  if (out.empty()) {
    return absl::NotFoundError(
        absl::StrCat("migrations folder '", dir, "' holds no NNN_name.sql"));
  }
  return out;
}

int LatestKnownVersion() {
  return static_cast<int>(EmbeddedMigrations().size());
}

}  // namespace sqlgroup::internal
