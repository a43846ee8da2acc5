// Text as PostgreSQL will store it, for what a member writes into a text
// column from outside (a handler's error message as last_error).
#ifndef SQLGROUP_STORE_STORABLE_TEXT_H_
#define SQLGROUP_STORE_STORABLE_TEXT_H_

#include <string>

namespace sqlgroup::store {

// `raw` as PostgreSQL will store it in a text column: an error message
// (a handler's, usually) may hold bytes that are not UTF-8 or a NUL, which the
// database refuses (and then the failure could never be recorded). Such bytes
// become '?'. Well-formed UTF-8 is that of Unicode's table 3-7: no
// overlong forms, no surrogates, nothing past U+10FFFF. A URL's password
// or token is masked (url_secrets.h): the member role can read the table.
std::string StorableText(const std::string& raw);

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_STORABLE_TEXT_H_
