// absl::Duration <-> SQL interval, exact to the microsecond (the
// resolution of PostgreSQL's interval and timestamptz).
#ifndef SQLGROUP_STORE_INTERVAL_H_
#define SQLGROUP_STORE_INTERVAL_H_

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace sqlgroup::store {

// A literal for `$n::interval`, e.g. "1.500000 seconds". In seconds, not
// microseconds: PostgreSQL 14 refuses a field over 2^31 ("3600000000
// microseconds", an hour, is out of range there; 15 and later take it).
inline std::string ToInterval(absl::Duration d) {
  const int64_t micros = absl::ToInt64Microseconds(d);
  const uint64_t magnitude =
      micros < 0 ? 0 - static_cast<uint64_t>(micros) : micros;
  return absl::StrCat(micros < 0 ? "-" : "", magnitude / 1000000, ".",
                      absl::Dec(magnitude % 1000000, absl::kZeroPad6),
                      " seconds");
}

// SQL that turns an interval expression into whole microseconds (bigint),
// so the client never parses interval text.
inline std::string MicrosOf(const std::string& expr) {
  return absl::StrCat("(extract(epoch from ", expr, ") * 1000000)::bigint");
}

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_INTERVAL_H_
