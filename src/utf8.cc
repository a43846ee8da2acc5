#include "utf8.h"

namespace sqlgroup {

size_t Utf8SequenceAt(absl::string_view text, size_t i) {
  const unsigned char c = static_cast<unsigned char>(text[i]);
  // The sequence's length, and the range of its second byte.
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xbf;
  if (c <= 0x7f) {
    return 1;
  } else if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    if (c == 0xe0) lo = 0xa0;  // overlong
    if (c == 0xed) hi = 0x9f;  // surrogates
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    if (c == 0xf0) lo = 0x90;  // overlong
    if (c == 0xf4) hi = 0x8f;  // past U+10FFFF
  } else {
    return 0;
  }
  if (i + len > text.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    const unsigned char b = static_cast<unsigned char>(text[i + k]);
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xbf)) return 0;
  }
  return len;
}

}  // namespace sqlgroup
