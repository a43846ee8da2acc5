#include "migrations.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace sqlgroup::internal {
namespace {

bool LooksLikeMigration(const std::string& name) {
  return name.size() > 8 && std::isdigit(name[0]) && std::isdigit(name[1]) &&
         std::isdigit(name[2]) && name[3] == '_' &&
         name.substr(name.size() - 4) == ".sql";
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
