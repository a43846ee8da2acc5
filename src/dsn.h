// Connection strings: where they come from, and how they are shown. Pure.
#ifndef SQLGROUP_DSN_H_
#define SQLGROUP_DSN_H_

#include <string>
#include <string_view>

namespace sqlgroup {

// The connection string to use: `flag` if non-empty, else $SQLGROUP_DSN,
// else "" (libpq then reads its own PG* variables).
std::string ResolveDsn(const std::string& flag);

// The DSN with every password replaced by "***", for logs, errors, metrics
// and describe output. Handles keyword/value strings (password=..., quoted
// or not) and URIs (postgresql://user:secret@host/db, ?password=...).
std::string MaskDsn(std::string_view dsn);

// Adds connect_timeout=`seconds` unless the DSN sets one, so an unreachable
// host fails in bounded time.
std::string WithConnectTimeout(const std::string& dsn, int seconds);

}  // namespace sqlgroup

#endif  // SQLGROUP_DSN_H_
