// Items read from lines, for `sqlgroup produce --input FILE|-` (pure: no
// database). Two formats, one item per line:
//
//   text  KEY<delimiter>PAYLOAD: the key is what comes before the first
//         delimiter, the payload every byte after it (the line's '\n'
//         excepted). A line without the delimiter, or beginning with it, is
//         an unkeyed item whose payload is the rest. An empty delimiter
//         makes every line an unkeyed payload.
//   json  {"key": "k" or null, "payload": "text", "delay": "5s" or 5}: a
//         payload of any bytes as "payload_base64" instead; a delay as a
//         duration ("1m30s", "250ms") or a number of seconds. Other fields
//         are refused, so a misspelt one is not silently dropped.
//
// Empty lines are skipped in both.
#ifndef SQLGROUP_CLI_PRODUCE_INPUT_H_
#define SQLGROUP_CLI_PRODUCE_INPUT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sqlgroup/producer.h"

namespace sqlgroup::cli {

enum class InputFormat { kText, kJson };

// --format: "text" or "json"; INVALID_ARGUMENT naming the flag otherwise.
absl::StatusOr<InputFormat> ParseInputFormat(absl::string_view text);

// --key_delimiter as given: a backslash-t ("\t", as a shell passes it) is a
// tab; any other text is taken as it is.
std::string KeyDelimiter(absl::string_view flag);

// OK for text PostgreSQL stores as a key: UTF-8 without NUL bytes (a key's
// bytes place the item, so a key the database would cut or refuse must not
// go). INVALID_ARGUMENT saying which, as the end of a sentence.
absl::Status CheckKeyText(absl::string_view key);

// One text line (without its '\n').
NewItem ParseTextLine(absl::string_view line, absl::string_view delimiter);

// One JSON line; `delay` unless it has its own. INVALID_ARGUMENT saying
// what is wrong with it.
absl::StatusOr<NewItem> ParseJsonLine(absl::string_view line,
                                      absl::Duration delay = {});

// Reads lines from a file descriptor, and says whether one more can be had
// without waiting: `produce --input -` sends what has arrived as a batch
// instead of holding items back until a batch fills.
class LineReader {
 public:
  explicit LineReader(int fd) : fd_(fd) {}

  // The next line without its '\n' (the last may lack one). False at the
  // end of the input; a read error is returned by status().
  bool Next(std::string* line);

  // True when Next would not wait: a line is buffered, or the descriptor
  // has data or is at its end.
  bool Ready();

  const absl::Status& status() const { return status_; }

 private:
  bool Fill();  // one read(); false at the end or on an error

  int fd_;
  std::string buffer_;
  size_t start_ = 0;
  bool eof_ = false;
  absl::Status status_;
};

}  // namespace sqlgroup::cli

#endif  // SQLGROUP_CLI_PRODUCE_INPUT_H_
