#include "schema_skew.h"

#include "absl/strings/str_cat.h"

namespace sqlgroup::internal {
namespace {

std::string Binary(const BinarySchemas& b) {
  return absl::StrCat("this sqlgroup (", b.version, ") runs against schemas ",
                      b.oldest, " to ", b.known);
}

}  // namespace

absl::StatusOr<Skew> CheckSkew(const SchemaState& db,
                               const BinarySchemas& binary) {
  if (db.version == 0) {
    return absl::FailedPreconditionError(
        "this database has no sqlgroup schema: run `sqlgroup migrate` "
        "(with the same --dsn) first");
  }
  if (db.version == binary.known) return Skew::kSame;
  if (db.version < binary.known) {
    if (db.version >= binary.oldest) return Skew::kOlderServed;
    return absl::FailedPreconditionError(absl::StrCat(
        "the database's sqlgroup schema is version ", db.version, "; ",
        Binary(binary), ": run `sqlgroup migrate` with this binary"));
  }
  if (db.members_from <= binary.known) return Skew::kNewerAccepted;
  return absl::FailedPreconditionError(absl::StrCat(
      "the database's sqlgroup schema is version ", db.version,
      ", which accepts only members that know schema ", db.members_from,
      " or newer; ", Binary(binary),
      ": run a sqlgroup release that knows schema ", db.members_from,
      " (`sqlgroup --version` says which schemas a binary knows; "
      "docs/UPGRADING.md)"));
}

std::string SkewNote(Skew skew, const SchemaState& db,
                     const BinarySchemas& binary) {
  switch (skew) {
    case Skew::kSame:
      return "";
    case Skew::kOlderServed:
      return absl::StrCat(
          "the database's sqlgroup schema is version ", db.version,
          ", older than this sqlgroup's (", binary.version, ", schema ",
          binary.known,
          "): it runs with the features of the newer schemas off until "
          "`sqlgroup migrate` runs",
          db.version < kVersionsRecordedFrom
              ? " (members' versions are not recorded before schema 14)"
              : "");
    case Skew::kNewerAccepted:
      return absl::StrCat(
          "the database's sqlgroup schema is version ", db.version,
          ", newer than this sqlgroup's (", binary.version, ", schema ",
          binary.known, "); it accepts members that know schema ",
          db.members_from,
          " or newer, so this one runs, without the newer features: upgrade "
          "it when you can");
  }
  return "";
}

}  // namespace sqlgroup::internal
