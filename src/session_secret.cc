#include "session_secret.h"

#include <random>

#include "absl/strings/str_format.h"

namespace sqlgroup::internal {

std::string NewSessionSecret() {
  // libstdc++ reads getrandom(2) (or /dev/urandom): not a predictable
  // pseudo-random sequence another process could reproduce.
  std::random_device random;
  std::string secret;
  for (int i = 0; i < 4; ++i) absl::StrAppendFormat(&secret, "%08x", random());
  return secret;
}

}  // namespace sqlgroup::internal
