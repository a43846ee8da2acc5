#include "dsn.h"

#include <cstdlib>
#include <regex>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace sqlgroup {
namespace {

bool IsUri(std::string_view dsn) {
  return dsn.starts_with("postgresql://") || dsn.starts_with("postgres://");
}

}  // namespace

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
    // scheme://user:secret@host -> scheme://user:***@host
    static const std::regex kUserInfo(
        R"(^(postgres(?:ql)?://[^:@/?]*):[^@/?]*@)");
    out = std::regex_replace(out, kUserInfo, "$1:***@");
    static const std::regex kQuery(R"(([?&]password=)[^&]*)",
                                   std::regex::icase);
    return std::regex_replace(out, kQuery, "$1***");
  }
  // password = 'quoted \' value' or password=bare
  static const std::regex kKeyword(
      R"((password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s]*))", std::regex::icase);
  return std::regex_replace(out, kKeyword, "$1***");
}

std::string WithConnectTimeout(const std::string& dsn, int seconds) {
  if (absl::AsciiStrToLower(dsn).find("connect_timeout") != std::string::npos) {
    return dsn;
  }
  if (IsUri(dsn)) {
    const char sep = dsn.find('?') == std::string::npos ? '?' : '&';
    return absl::StrCat(dsn, std::string(1, sep), "connect_timeout=", seconds);
  }
  return absl::StrCat(dsn, dsn.empty() ? "" : " ", "connect_timeout=", seconds);
}

}  // namespace sqlgroup
