// absl::Duration <-> SQL interval, exact to the microsecond (the
// resolution of PostgreSQL's interval and timestamptz).
#ifndef SQLGROUP_STORE_INTERVAL_H_
#define SQLGROUP_STORE_INTERVAL_H_

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace sqlgroup::store {

// A literal for `$n::interval`, e.g. "1500000 microseconds".
inline std::string ToInterval(absl::Duration d) {
  return absl::StrCat(absl::ToInt64Microseconds(d), " microseconds");
}

// SQL that turns an interval expression into whole microseconds (bigint),
// so the client never parses interval text.
inline std::string MicrosOf(const std::string& expr) {
  return absl::StrCat("(extract(epoch from ", expr, ") * 1000000)::bigint");
}

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_INTERVAL_H_
