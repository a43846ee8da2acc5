// The version skew rule: which binaries may run against which database
// schemas (docs/UPGRADING.md). Pure: the caller reads the database.
//
// A binary knows schemas up to `known` and serves every schema from
// `oldest` to `known` (newer features off on the older ones). A schema
// newer than `known` says, through its last migration's "-- members-from:"
// line, the oldest schema a member may know and still run on it: an
// additive (expand) migration accepts the members of the release before
// it; one that changes what members must do (contract) accepts only the
// members that know it.
#ifndef SQLGROUP_SCHEMA_SKEW_H_
#define SQLGROUP_SCHEMA_SKEW_H_

#include <string>

#include "absl/status/statusor.h"
#include "sqlgroup/version.h"

namespace sqlgroup::internal {

// The first schema that records members' versions (sessions.member_schema
// and member_version) and migrations' members_from.
inline constexpr int kVersionsRecordedFrom = 14;

// The first schema that stores pauses (sqlgroup.pauses, enforced in the
// claims) and marks requeued items.
inline constexpr int kPausesFrom = 17;

// The first schema that stores a group's dead-letter policies
// (groups.dead_retention, enforced through sqlgroup.dead_expire;
// groups.on_dead, its holds kept by triggers) and cancels items.
inline constexpr int kDeadRetentionFrom = 18;

// The first schema that scopes roles to groups (sqlgroup.group_grants,
// row-level security, sqlgroup.require_grant) and keeps sessions' secrets.
inline constexpr int kGroupGrantsFrom = 19;

// The first schema with topics (sqlgroup.topics, groups.topic, publish).
inline constexpr int kTopicsFrom = 20;

// What the database's sqlgroup schema says of who may use it.
struct SchemaState {
  int version = 0;  // the newest applied migration; 0: no sqlgroup schema
  // The oldest schema a member may know and run against this one: its
  // last migration's "-- members-from:" (its own version before schema 14).
  int members_from = 0;
};

// The schemas a binary knows and serves.
struct BinarySchemas {
  std::string version;  // "0.15.0"
  int known = 0;
  int oldest = 0;
};
inline BinarySchemas ThisBinary() {
  return {kVersion, kSchemaVersion, kOldestServedSchema};
}

enum class Skew {
  kSame,           // the database has the schema the binary knows best
  kOlderServed,    // older, served with the newer features off
  kNewerAccepted,  // newer, and it accepts members that know `known`
};

// Whether `binary` may run against `db`; FAILED_PRECONDITION with a
// sentence naming both versions and what to do otherwise.
absl::StatusOr<Skew> CheckSkew(const SchemaState& db,
                               const BinarySchemas& binary);

// The sentence a binary logs once when it runs against a schema other
// than its own (kOlderServed, kNewerAccepted); empty for kSame.
std::string SkewNote(Skew skew, const SchemaState& db,
                     const BinarySchemas& binary);

}  // namespace sqlgroup::internal

#endif  // SQLGROUP_SCHEMA_SKEW_H_
