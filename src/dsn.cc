#include "dsn.h"

#include <libpq-fe.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <regex>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

namespace sqlgroup {
namespace {

bool IsUri(std::string_view dsn) {
  return dsn.starts_with("postgresql://") || dsn.starts_with("postgres://");
}

// scheme://user:secret@host: the password runs to the last '@' before the
// query, so a password with an unencoded '/' or '@' is still hidden whole.
const std::regex& UriUserInfo() {
  static const auto* const kRe =
      new std::regex(R"(^(postgres(?:ql)?://[^:@/?]*):([^?]*)@)");
  return *kRe;
}
const std::regex& UriQueryPassword() {
  static const auto* const kRe =
      new std::regex(R"(([?&](?:ssl)?password=)([^&]*))", std::regex::icase);
  return *kRe;
}
// password = 'quoted \' value', or a bare value with backslash escapes.
// Also matches sslpassword.
const std::regex& KeywordPassword() {
  static const auto* const kRe =
      new std::regex(R"((password\s*=\s*)('(?:[^'\\]|\\.)*'|(?:[^\s\\]|\\.)*))",
                     std::regex::icase);
  return *kRe;
}

std::string PercentDecode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && absl::ascii_isxdigit(s[i + 1]) &&
        absl::ascii_isxdigit(s[i + 2])) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// A keyword/value value as libpq reads it: quotes removed, \x -> x.
std::string Unquote(std::string s) {
  if (s.size() >= 2 && s.front() == '\'' && s.back() == '\'') {
    s = s.substr(1, s.size() - 2);
  }
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) ++i;
    out += s[i];
  }
  return out;
}

// The passwords MaskDsn hides, decoded as libpq would read them.
std::vector<std::string> MaskedPasswords(std::string_view dsn) {
  std::vector<std::string> out;
  const std::string s(dsn);
  std::smatch m;
  if (IsUri(dsn)) {
    if (std::regex_search(s, m, UriUserInfo())) {
      out.push_back(PercentDecode(m[2].str()));
    }
    for (auto it = std::sregex_iterator(s.begin(), s.end(), UriQueryPassword());
         it != std::sregex_iterator(); ++it) {
      out.push_back(PercentDecode((*it)[2].str()));
    }
  } else {
    for (auto it = std::sregex_iterator(s.begin(), s.end(), KeywordPassword());
         it != std::sregex_iterator(); ++it) {
      out.push_back(Unquote((*it)[2].str()));
    }
  }
  std::erase(out, "");
  std::sort(out.begin(), out.end());
  return out;
}

// Calls `each(keyword, value)` for every option libpq reads from `dsn`
// with a value; false (and no call) when it cannot parse it.
bool ForEachOption(
    std::string_view dsn,
    const std::function<void(std::string_view, const char*)>& each) {
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(std::string(dsn).c_str(), &error);
  PQfreemem(error);
  if (options == nullptr) return false;
  for (PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    if (o->val != nullptr) each(o->keyword, o->val);
  }
  PQconninfoFree(options);
  return true;
}

// The passwords libpq reads from `dsn`; false when it cannot parse it.
bool ParsedPasswords(std::string_view dsn, std::vector<std::string>* out) {
  const bool parsed = ForEachOption(dsn, [&](std::string_view keyword,
                                             const char* value) {
    if ((keyword == "password" || keyword == "sslpassword") && *value != '\0') {
      out->push_back(value);
    }
  });
  std::sort(out->begin(), out->end());
  return parsed;
}

}  // namespace

std::string RoleOfDsn(std::string_view dsn) {
  std::string user;
  ForEachOption(dsn, [&](std::string_view keyword, const char* value) {
    if (keyword == "user") user = value;
  });
  if (!user.empty()) return user;
  if (const char* env = std::getenv("PGUSER"); env != nullptr && *env) {
    return env;
  }
  // getpwuid_r: several members of a process may ask at once.
  passwd pw;
  passwd* found = nullptr;
  char buffer[1024];
  if (getpwuid_r(geteuid(), &pw, buffer, sizeof buffer, &found) == 0 &&
      found != nullptr) {
    return found->pw_name;
  }
  return "";
}

std::string ResolveDsn(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("SQLGROUP_DSN"); env != nullptr) {
    return env;
  }
  return "";
}

std::string MaskDsn(std::string_view dsn) {
  std::string out(dsn);
  if (IsUri(dsn)) {
    out = std::regex_replace(out, UriUserInfo(), "$1:***@");
    return std::regex_replace(out, UriQueryPassword(), "$1***");
  }
  return std::regex_replace(out, KeywordPassword(), "$1***");
}

bool MaskIsExact(std::string_view dsn) {
  const std::vector<std::string> masked = MaskedPasswords(dsn);
  std::vector<std::string> parsed;
  if (!ParsedPasswords(dsn, &parsed)) return masked.empty();
  return parsed == masked;
}

std::string RedactPasswords(std::string text, std::string_view dsn) {
  std::vector<std::string> secrets = MaskedPasswords(dsn);
  ParsedPasswords(dsn, &secrets);
  // Longest first, so a password containing another is replaced whole.
  std::sort(secrets.begin(), secrets.end(),
            [](const std::string& a, const std::string& b) {
              return a.size() > b.size();
            });
  for (const std::string& secret : secrets) {
    text = absl::StrReplaceAll(text, {{secret, "***"}});
  }
  return text;
}

std::string WithParameter(const std::string& dsn, const std::string& key,
                          const std::string& value) {
  if (absl::AsciiStrToLower(dsn).find(key) != std::string::npos) return dsn;
  if (IsUri(dsn)) {
    std::string encoded;
    for (unsigned char c : value) {
      if (absl::ascii_isalnum(c) || c == '-' || c == '.' || c == '_' ||
          c == '~') {
        encoded += static_cast<char>(c);
      } else {
        encoded += absl::StrFormat("%%%02X", c);
      }
    }
    const char sep = dsn.find('?') == std::string::npos ? '?' : '&';
    return absl::StrCat(dsn, std::string(1, sep), key, "=", encoded);
  }
  const bool plain =
      !value.empty() && std::all_of(value.begin(), value.end(), [](char c) {
        return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' ||
               c == '.' || c == '_';
      });
  if (plain) return absl::StrCat(dsn, dsn.empty() ? "" : " ", key, "=", value);
  std::string quoted = "'";
  for (char c : value) {
    if (c == '\\' || c == '\'') quoted += '\\';
    quoted += c;
  }
  quoted += "'";
  return absl::StrCat(dsn, dsn.empty() ? "" : " ", key, "=", quoted);
}

std::string WithConnectTimeout(const std::string& dsn, int seconds) {
  return WithParameter(dsn, "connect_timeout", absl::StrCat(seconds));
}

}  // namespace sqlgroup
