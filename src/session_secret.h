// The secret a member keeps for its session (schema 19): the session row
// stores only its SHA-256, and a role scoped to groups may end a live
// session only in a transaction that names the secret.
#ifndef SQLGROUP_SESSION_SECRET_H_
#define SQLGROUP_SESSION_SECRET_H_

#include <string>

namespace sqlgroup::internal {

// 128 bits from the operating system's random source, as 32 hex digits.
std::string NewSessionSecret();

}  // namespace sqlgroup::internal

#endif  // SQLGROUP_SESSION_SECRET_H_
