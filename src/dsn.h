// Connection strings: where they come from, and how they are shown. Pure
// (libpq's parser is used, never a connection).
#ifndef SQLGROUP_DSN_H_
#define SQLGROUP_DSN_H_

#include <string>
#include <string_view>

namespace sqlgroup {

// The connection string to use: `flag` if non-empty, else $SQLGROUP_DSN,
// else "" (libpq then reads its own PG* variables).
std::string ResolveDsn(const std::string& flag);

// The DSN with every password replaced by "***", for logs, errors, metrics
// and describe output. Handles keyword/value strings (password=..., quoted,
// bare or with backslash escapes; sslpassword too) and URIs
// (postgresql://user:secret@host/db, ?password=...).
std::string MaskDsn(std::string_view dsn);

// True when MaskDsn(dsn) hides exactly the passwords libpq reads from
// `dsn`. False for a string holding a password that libpq cannot parse or
// reads differently (an unencoded '/' or '@' in a URI's password, an
// unquoted space): its masked text, and libpq's messages about it, may
// show part of the password, so neither may be shown.
bool MaskIsExact(std::string_view dsn);

// `text` with every password libpq reads from `dsn` replaced by "***": for
// messages that come from libpq or the server.
std::string RedactPasswords(std::string text, std::string_view dsn);

// The database role a connection with `dsn` logs in as, as libpq decides
// it: the DSN's user, else $PGUSER, else the operating system's user name
// (a user set in a pg_service.conf service is not read).
std::string RoleOfDsn(std::string_view dsn);

// Adds `key`=`value` (quoted or percent-encoded as the form needs) unless
// the DSN mentions `key`.
std::string WithParameter(const std::string& dsn, const std::string& key,
                          const std::string& value);

// Adds connect_timeout=`seconds` unless the DSN sets one, so an unreachable
// host fails in bounded time.
std::string WithConnectTimeout(const std::string& dsn, int seconds);

}  // namespace sqlgroup

#endif  // SQLGROUP_DSN_H_
