// `sqlgroup group describe` output: a kafka-consumer-groups style table, or
// JSON for scripts. Pure formatting.
#ifndef SQLGROUP_CLI_DESCRIBE_FORMAT_H_
#define SQLGROUP_CLI_DESCRIBE_FORMAT_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "sqlgroup/admin.h"

namespace sqlgroup::cli {

std::string DescriptionText(const GroupDescription& d);
std::string DescriptionJson(const GroupDescription& d);
std::string GroupListText(const std::vector<GroupConfig>& groups);
std::string GroupListJson(const std::vector<GroupConfig>& groups);

// A duration as seconds with three decimals, for JSON: "1.500".
std::string Seconds(absl::Duration d);

// A JSON string literal, quotes included.
std::string JsonString(const std::string& s);

// A time for a person: "2026-11-28 14:50:25 UTC".
std::string TimeText(absl::Time t);

// `s` as one word for a POSIX shell, in single quotes: for a command the
// output suggests (`sqlgroup group resume G --key 'k'`).
std::string ShellWord(const std::string& s);

}  // namespace sqlgroup::cli

#endif  // SQLGROUP_CLI_DESCRIBE_FORMAT_H_
