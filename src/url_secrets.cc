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
  size_t path = url.find_first_of("/?#", authority);
  if (path == absl::string_view::npos) path = url.size();
  std::string out(url.substr(0, authority));
  // user:password@host: the password goes (the last '@' ends the user
  // info; a password may hold '@' when not percent-encoded).
  absl::string_view host = url.substr(authority, path - authority);
  const size_t at = host.rfind('@');
  if (at != absl::string_view::npos) {
    const absl::string_view info = host.substr(0, at);
    const size_t colon = info.find(':');
    if (colon != absl::string_view::npos) {
      absl::StrAppend(&out, info.substr(0, colon), ":", kMask, "@");
    } else {
      absl::StrAppend(&out, info, "@");
    }
    host = host.substr(at + 1);
  }
  absl::StrAppend(&out, host);
  absl::string_view rest = url.substr(path);
  const size_t q = rest.find('?');
  if (q == absl::string_view::npos) {
    absl::StrAppend(&out, rest);
    return out;
  }
  absl::StrAppend(&out, rest.substr(0, q + 1));
  absl::string_view query = rest.substr(q + 1);
  const size_t hash = query.find('#');
  absl::StrAppend(&out, MaskQuery(query.substr(0, hash)));
  if (hash != absl::string_view::npos)
    absl::StrAppend(&out, query.substr(hash));
  return out;
}

std::string MaskUrlsIn(absl::string_view text) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    size_t http = text.find("http", i);
    if (http == absl::string_view::npos) break;
    const bool url = absl::StartsWith(text.substr(http), "http://") ||
                     absl::StartsWith(text.substr(http), "https://");
    if (!url) {
      absl::StrAppend(&out, text.substr(i, http + 4 - i));
      i = http + 4;
      continue;
    }
    size_t end = text.find_first_of(" \t\r\n\"'<>", http);
    if (end == absl::string_view::npos) end = text.size();
    absl::StrAppend(&out, text.substr(i, http - i),
                    MaskUrl(text.substr(http, end - http)));
    i = end;
  }
  absl::StrAppend(&out, text.substr(std::min(i, text.size())));
  return out;
}

}  // namespace sqlgroup
