// Well-formed UTF-8, as PostgreSQL's text accepts it: Unicode's table 3-7
// (no overlong forms, no surrogates, nothing past U+10FFFF). One reading
// for what a member stores (StorableText), what a producer sends as a key
// (CheckKeyText) and what the CLI shows as text.
#ifndef SQLGROUP_UTF8_H_
#define SQLGROUP_UTF8_H_

#include <cstddef>

#include "absl/strings/string_view.h"

namespace sqlgroup {

// The length (1 to 4) of the well-formed sequence that starts at byte `i`
// of `text`, or 0 when none does there. A NUL byte is a sequence of 1:
// callers that store text refuse it themselves.
size_t Utf8SequenceAt(absl::string_view text, size_t i);

}  // namespace sqlgroup

#endif  // SQLGROUP_UTF8_H_
