// Which sqlgroup this is, and which database schemas it can run against.
//
// Before 1.0 the minor version is the newest schema the release knows:
// sqlgroup 0.18.x knows schema 18. docs/UPGRADING.md has the rule that says
// which releases may run against which schemas, and the table.
#ifndef SQLGROUP_VERSION_H_
#define SQLGROUP_VERSION_H_

namespace sqlgroup {

// This release, as `sqlgroup --version`, the sqlgroup_build_info metric
// and `group describe` show it (and CMake's project version).
inline constexpr char kVersion[] = "0.21.0";

// The newest schema version this release knows: the number of the last
// migration in sql/ (`sqlgroup migrate` takes a database there).
inline constexpr int kSchemaVersion = 21;

// The oldest schema this release runs against, with the features of the
// newer schemas off until `sqlgroup migrate` runs: a new release can be
// rolled out while the database still has the previous schema. A newer
// schema than kSchemaVersion is served only when that schema says it
// accepts members that know kSchemaVersion (docs/UPGRADING.md).
inline constexpr int kOldestServedSchema = 13;

}  // namespace sqlgroup

#endif  // SQLGROUP_VERSION_H_
