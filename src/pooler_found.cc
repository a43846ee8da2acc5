#include "pooler_found.h"

#include "absl/strings/str_cat.h"

namespace sqlgroup::internal {

std::string PoolerFound(std::string_view who) {
  return absl::StrCat(
      std::string(who),
      " connects through a connection pooler (the process id it was given "
      "at connect is not the server's): working as with --pool_mode "
      "transaction (PoolMode::kTransaction), keeping nothing in the server "
      "session and polling unless --listen_dsn (listen_dsn) goes straight "
      "to the database (docs/POOLERS.md). A pooler in session mode looks "
      "the same: pass --pool_mode direct (PoolMode::kDirect) for it to "
      "keep LISTEN");
}

}  // namespace sqlgroup::internal
