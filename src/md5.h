// MD5 (RFC 1321) of a byte string. Key placement hashes item keys with it
// because PostgreSQL's built-in md5() computes the same digest, so the
// library and SQL place a key identically:
//   std::array<uint8_t, 16> d = Md5("abc");  // 90 01 50 98 ... 7f 72
// Computed by OpenSSL's libcrypto (EVP). Not for security. Pure and
// thread-safe.
#ifndef SQLGROUP_MD5_H_
#define SQLGROUP_MD5_H_

#include <array>
#include <cstdint>
#include <string_view>

namespace sqlgroup {

// The 16-byte digest of `bytes`, in the RFC's output order (the order of
// PostgreSQL's md5() hex text). Aborts the process, saying why, when
// OpenSSL offers no MD5 (a FIPS-only configuration): keys cannot be placed
// without it.
std::array<uint8_t, 16> Md5(std::string_view bytes);

}  // namespace sqlgroup

#endif  // SQLGROUP_MD5_H_
