// Members' versions as the database records them (schema 14 on): the
// schema's own state (its version and which members it accepts), the live
// members a schema would leave behind, fencing them, and a member
// recording its version. The rule itself is schema_skew.h's.
#ifndef SQLGROUP_STORE_MEMBER_VERSIONS_H_
#define SQLGROUP_STORE_MEMBER_VERSIONS_H_

#include <pqxx/connection>
#include <pqxx/transaction>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "schema_skew.h"

namespace sqlgroup::store {

// The recorded version and the oldest schema a member may know to run on
// it; {0, 0} when the database has no sqlgroup schema.
absl::StatusOr<internal::SchemaState> ReadSchemaState(pqxx::connection& conn);

// A live member (heartbeating, or a static member away) as a migration
// weighs it.
struct MemberVersion {
  std::string session;
  std::string group;
  std::string host;
  int pid = 0;
  std::string instance;  // empty: none
  std::string version;   // empty: not recorded (a release before 0.15)
  int schema = 0;        // the newest schema it knows; 0: not recorded
  bool away = false;     // a static member stopped, keeping its place
  // The schema it counts as knowing: `schema`, or for one that records
  // nothing, 13 (the last schema before versions were recorded) or the
  // database's version if that is older (it ran only against its own).
  int knows = 0;

  // "group G: host H pid P (instance I), sqlgroup 0.15.0 (schema 15)"
  std::string Describe() const;
};

// The live members of every group that know a schema older than `needed`,
// on a database at schema `db_version`. The second form runs in `tx` and
// throws (for the caller's Guard).
absl::StatusOr<std::vector<MemberVersion>> MembersOlderThan(
    pqxx::connection& conn, int db_version, int needed);
std::vector<MemberVersion> MembersOlderThan(pqxx::transaction_base& tx,
                                            int db_version, int needed);

// Ends the sessions of `members` in `tx` (their parts go to the others,
// their takes end as a reap's do: the next owner counts an attempt), and
// tells each group to rebalance. The members' next heartbeat finds their
// session gone; registering again, they meet the schema's fence.
void FenceMembers(pqxx::work& tx, int db_version,
                  const std::vector<MemberVersion>& members);

// Records this binary's version in `session` (schema 14 on): for a member
// that joined before the schema recorded versions.
absl::Status RecordMemberVersion(pqxx::connection& conn,
                                 const std::string& session);

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_MEMBER_VERSIONS_H_
