// What PoolMode::kAuto says, once, when it finds a pooler in front of the
// database (sqlgroup/pool_mode.h).
#ifndef SQLGROUP_POOLER_FOUND_H_
#define SQLGROUP_POOLER_FOUND_H_

#include <string>
#include <string_view>

#include "sqlgroup/pool_mode.h"

namespace sqlgroup::internal {

// The sentence for `who` ("group g's member", "the producer into g").
std::string PoolerFound(std::string_view who);

// kDirect or kTransaction for a connection opened in `asked` (kAuto: what
// the connection found, `pooled`).
inline PoolMode Resolved(PoolMode asked, bool pooled) {
  if (asked != PoolMode::kAuto) return asked;
  return pooled ? PoolMode::kTransaction : PoolMode::kDirect;
}

}  // namespace sqlgroup::internal

#endif  // SQLGROUP_POOLER_FOUND_H_
