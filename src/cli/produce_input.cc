#include "cli/produce_input.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "utf8.h"

namespace sqlgroup::cli {

absl::StatusOr<InputFormat> ParseInputFormat(absl::string_view text) {
  if (text == "text") return InputFormat::kText;
  if (text == "json") return InputFormat::kJson;
  return absl::InvalidArgumentError(absl::StrCat(
      "--format must be text (KEY<tab>PAYLOAD per line) or json (one object "
      "per line), got '",
      text, "'"));
}

std::string KeyDelimiter(absl::string_view flag) {
  if (flag == "\\t") return "\t";
  return std::string(flag);
}

absl::Status CheckKeyText(absl::string_view key) {
  for (size_t i = 0; i < key.size();) {
    if (key[i] == '\0') {
      return absl::InvalidArgumentError(
          "holds a NUL byte, which PostgreSQL text cannot");
    }
    const size_t len = Utf8SequenceAt(key, i);
    if (len == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("is not UTF-8 (at byte ", i + 1, ")"));
    }
    i += len;
  }
  return absl::OkStatus();
}

NewItem ParseTextLine(absl::string_view line, absl::string_view delimiter) {
  NewItem item;
  const size_t at =
      delimiter.empty() ? absl::string_view::npos : line.find(delimiter);
  if (at == absl::string_view::npos) {
    item.payload = std::string(line);
    return item;
  }
  if (at > 0) item.key = std::string(line.substr(0, at));
  item.payload = std::string(line.substr(at + delimiter.size()));
  return item;
}

namespace {

absl::Status NotA(const char* field, const char* what,
                  const nlohmann::json& value) {
  return absl::InvalidArgumentError(
      absl::StrCat("\"", field, "\" must be ", what, ", got ", value.dump()));
}

}  // namespace

absl::StatusOr<NewItem> ParseJsonLine(absl::string_view line,
                                      absl::Duration delay) {
  nlohmann::json object;
  try {
    object = nlohmann::json::parse(line.begin(), line.end());
  } catch (const nlohmann::json::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        "it is not JSON (the text stops making sense at byte ", e.byte, ")"));
  }
  if (!object.is_object()) {
    return absl::InvalidArgumentError(
        "it is not a JSON object like {\"key\": \"k\", \"payload\": \"p\"}");
  }
  NewItem item;
  item.delay = delay;
  bool has_payload = false;
  for (const auto& [name, value] : object.items()) {
    if (name == "key") {
      if (value.is_string()) {
        item.key = value.get<std::string>();
      } else if (!value.is_null()) {
        return NotA("key", "a string or null", value);
      }
    } else if (name == "payload" || name == "payload_base64") {
      if (has_payload) {
        return absl::InvalidArgumentError(
            "it has both \"payload\" and \"payload_base64\": give one");
      }
      has_payload = true;
      if (!value.is_string()) {
        return NotA(name.c_str(), "a string", value);
      }
      if (name == "payload") {
        item.payload = value.get<std::string>();
      } else if (!absl::Base64Unescape(value.get<std::string>(),
                                       &item.payload)) {
        return absl::InvalidArgumentError(
            "\"payload_base64\" is not valid base64");
      }
    } else if (name == "delay") {
      if (value.is_number()) {
        const double seconds = value.get<double>();
        // Up to about 100 years: beyond, no interval is meant.
        if (!std::isfinite(seconds) || seconds < 0 || seconds > 3.2e9) {
          return NotA("delay", "a number of seconds of at least 0", value);
        }
        item.delay = absl::Seconds(seconds);
      } else if (!value.is_string() ||
                 !absl::ParseDuration(value.get<std::string>(), &item.delay) ||
                 item.delay < absl::ZeroDuration() ||
                 item.delay == absl::InfiniteDuration()) {
        return NotA("delay",
                    "a duration such as \"30s\" or \"1m30s\", or a number of "
                    "seconds",
                    value);
      }
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("it has a field \"", name,
                       "\" that produce does not know (it knows key, "
                       "payload, payload_base64 and delay)"));
    }
  }
  return item;
}

bool LineReader::Fill() {
  if (eof_ || !status_.ok()) return false;
  if (start_ > 0) {
    buffer_.erase(0, start_);
    start_ = 0;
  }
  char chunk[65536];
  for (;;) {
    const ssize_t n = read(fd_, chunk, sizeof chunk);
    if (n > 0) {
      buffer_.append(chunk, static_cast<size_t>(n));
      return true;
    }
    if (n == 0) {
      eof_ = true;
      return false;
    }
    if (errno == EINTR) continue;
    status_ = absl::UnavailableError(
        absl::StrCat("cannot read the input: ", std::strerror(errno)));
    return false;
  }
}

bool LineReader::Next(std::string* line) {
  for (;;) {
    const size_t newline = buffer_.find('\n', start_);
    if (newline != std::string::npos) {
      line->assign(buffer_, start_, newline - start_);
      start_ = newline + 1;
      return true;
    }
    if (!Fill()) {
      // A read error: the rest of the line may be missing, so it is no
      // item (status() says why).
      if (start_ >= buffer_.size() || !status_.ok()) return false;
      line->assign(buffer_, start_, std::string::npos);  // no '\n' at the end
      start_ = buffer_.size();
      return true;
    }
  }
}

bool LineReader::Ready() {
  if (buffer_.find('\n', start_) != std::string::npos || eof_) return true;
  pollfd fd{fd_, POLLIN, 0};
  return poll(&fd, 1, 0) != 0;
}

}  // namespace sqlgroup::cli
