#include "store/storable_text.h"

#include "url_secrets.h"
#include "utf8.h"

namespace sqlgroup::store {

std::string StorableText(const std::string& raw) {
  const std::string text = MaskUrlsIn(raw);
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t len = text[i] == '\0' ? 0 : Utf8SequenceAt(text, i);
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
