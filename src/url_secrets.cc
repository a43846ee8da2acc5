#include "url_secrets.h"

#include <array>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace sqlgroup {
namespace {

constexpr char kMask[] = "***";

bool SecretName(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  static constexpr std::array<absl::string_view, 12> kWords = {
      "token",     "key", "secret", "password",   "passwd",  "pwd",
      "signature", "sig", "auth",   "credential", "session", "apikey"};
  for (const absl::string_view word : kWords) {
    if (absl::StrContains(lower, word)) return true;
  }
  return false;
}

// The query (after '?', before '#') with secret values masked.
std::string MaskQuery(absl::string_view query) {
  std::string out;
  size_t start = 0;
  while (start <= query.size()) {
    size_t end = query.find('&', start);
    if (end == absl::string_view::npos) end = query.size();
    const absl::string_view pair = query.substr(start, end - start);
    const size_t eq = pair.find('=');
    if (eq != absl::string_view::npos && SecretName(pair.substr(0, eq)) &&
        eq + 1 < pair.size()) {
      absl::StrAppend(&out, pair.substr(0, eq + 1), kMask);
    } else {
      absl::StrAppend(&out, pair);
    }
    if (end == query.size()) break;
    out += '&';
    start = end + 1;
  }
  return out;
}

}  // namespace

std::string MaskUrl(absl::string_view url) {
  const size_t scheme = url.find("://");
  if (scheme == absl::string_view::npos) return std::string(url);
  const size_t authority = scheme + 3;
  // The user info ends at the last '@' before the query or fragment: a
  // password may hold '/' or '@' when it is not percent-encoded.
  size_t end = url.find_first_of("?#", authority);
  if (end == absl::string_view::npos) end = url.size();
  const size_t at = url.substr(0, end).rfind('@');
  std::string out(url.substr(0, authority));
  size_t host = authority;
  if (at != absl::string_view::npos && at >= authority) {
    const absl::string_view info = url.substr(authority, at - authority);
    const size_t colon = info.find(':');
    // A user name alone may be a token (https://TOKEN@host): masked too.
    absl::StrAppend(
        &out, colon == absl::string_view::npos ? "" : info.substr(0, colon),
        colon == absl::string_view::npos ? "" : ":", kMask, "@");
    host = at + 1;
  }
  size_t path = url.find_first_of("/?#", host);
  if (path == absl::string_view::npos) path = url.size();
  absl::StrAppend(&out, url.substr(host, path - host));
  absl::string_view rest = url.substr(path);
  // The query and the fragment (#access_token=... in OAuth's implicit
  // flow) alike.
  while (!rest.empty()) {
    const size_t mark = rest.find_first_of("?#");
    if (mark == absl::string_view::npos) {
      absl::StrAppend(&out, rest);
      break;
    }
    absl::StrAppend(&out, rest.substr(0, mark + 1));
    rest = rest.substr(mark + 1);
    const size_t next = rest.find('#');
    absl::StrAppend(&out, MaskQuery(rest.substr(0, next)));
    rest = next == absl::string_view::npos ? absl::string_view()
                                           : rest.substr(next);
  }
  return out;
}

std::string MaskUrlsIn(absl::string_view text) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    const std::string lower = absl::AsciiStrToLower(text.substr(i));
    const size_t http = lower.find("http");
    if (http == std::string::npos) break;
    const size_t from = i + http;
    const absl::string_view tail = lower;
    const bool url = absl::StartsWith(tail.substr(http), "http://") ||
                     absl::StartsWith(tail.substr(http), "https://");
    if (!url) {
      absl::StrAppend(&out, text.substr(i, http + 4));
      i = from + 4;
      continue;
    }
    size_t end = text.find_first_of(" \t\r\n\"'<>", from);
    if (end == absl::string_view::npos) end = text.size();
    // Punctuation after a URL in a sentence is the sentence's.
    while (end > from && absl::string_view(").,;:!").find(text[end - 1]) !=
                             absl::string_view::npos) {
      --end;
    }
    absl::StrAppend(&out, text.substr(i, from - i),
                    MaskUrl(text.substr(from, end - from)));
    i = end;
  }
  absl::StrAppend(&out, text.substr(std::min(i, text.size())));
  return out;
}

}  // namespace sqlgroup
