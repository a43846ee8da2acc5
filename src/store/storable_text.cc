#include "store/storable_text.h"

#include "url_secrets.h"

namespace sqlgroup::store {

std::string StorableText(const std::string& raw) {
  const std::string text = MaskUrlsIn(raw);
  std::string out;
  out.reserve(text.size());
  auto at = [&](size_t i) {
    return i < text.size() ? static_cast<unsigned char>(text[i]) : 0;
  };
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = at(i);
    // Length of the sequence `c` starts, and the range of its second byte.
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c >= 0x01 && c <= 0x7f)
      len = 1;
    else if (c >= 0xc2 && c <= 0xdf)
      len = 2;
    else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      if (c == 0xe0) lo = 0xa0;  // overlong
      if (c == 0xed) hi = 0x9f;  // surrogates
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      if (c == 0xf0) lo = 0x90;  // overlong
      if (c == 0xf4) hi = 0x8f;  // past U+10FFFF
    }
    for (size_t k = 1; k < len; ++k) {
      const unsigned char b = at(i + k);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xbf)) len = 0;
    }
    if (len == 0) {
      out += '?';
      ++i;
    } else {
      out.append(text, i, len);
      i += len;
    }
  }
  return out;
}

}  // namespace sqlgroup::store
