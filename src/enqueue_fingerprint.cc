#include "enqueue_fingerprint.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "absl/time/time.h"

namespace sqlgroup {
namespace {

void AppendBigEndian(std::string& out, uint64_t value, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) {
    out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  }
}

}  // namespace

std::string EnqueueFingerprint(const std::vector<NewItem>& items) {
  std::string bytes;
  for (const NewItem& item : items) {
    if (item.key) {
      bytes.push_back('\x01');
      AppendBigEndian(bytes, item.key->size(), 4);
      bytes += *item.key;
    } else {
      bytes.push_back('\x00');
    }
    AppendBigEndian(bytes, item.payload.size(), 4);
    bytes += item.payload;
    // A delay of 0 or less is none, as the insert takes it.
    const int64_t delay_us =
        std::max<int64_t>(0, absl::ToInt64Microseconds(item.delay));
    AppendBigEndian(bytes, static_cast<uint64_t>(delay_us), 8);
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &size, EVP_sha256(),
                 nullptr) != 1) {
    std::fprintf(stderr,
                 "sqlgroup: OpenSSL computed no SHA-256, which idempotency "
                 "keys need\n");
    std::abort();
  }
  return std::string(reinterpret_cast<const char*>(digest), size);
}

}  // namespace sqlgroup
