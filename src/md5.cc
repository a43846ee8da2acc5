#include "md5.h"

#include <openssl/evp.h>

#include <cstdio>
#include <cstdlib>

namespace sqlgroup {
namespace {

// MD5 from OpenSSL's default provider, fetched once: an explicit fetch
// spares every digest the method-store lookup that EVP_md5() costs in
// OpenSSL 3. Null when no provider offers MD5 (OpenSSL in FIPS-only mode).
const EVP_MD* FetchedMd5() {
  static const EVP_MD* const md = EVP_MD_fetch(nullptr, "MD5", nullptr);
  return md;
}

[[noreturn]] void Unavailable() {
  // Key placement cannot do without it: the library and PostgreSQL's md5()
  // must place a key identically, and a placement by any other hash would
  // put keys in the wrong parts.
  std::fputs(
      "sqlgroup: OpenSSL offers no MD5 (FIPS-only mode?); key placement "
      "needs it\n",
      stderr);
  std::abort();
}

}  // namespace

std::array<uint8_t, 16> Md5(std::string_view bytes) {
  const EVP_MD* md = FetchedMd5();
  if (md == nullptr) Unavailable();
  std::array<uint8_t, 16> digest;
  unsigned int size = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest.data(), &size, md,
                 nullptr) != 1 ||
      size != digest.size()) {
    Unavailable();
  }
  return digest;
}

}  // namespace sqlgroup
