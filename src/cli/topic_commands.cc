// `sqlgroup topic create|delete|list|describe` (docs/TOPICS.md): the
// Admin's topics, printed for a person or, with --json, for a script.
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/describe_format.h"
#include "cli/flags.h"
#include "cli/subcommands.h"
#include "sqlgroup/admin.h"
#include "status_macros.h"

namespace sqlgroup::cli {
namespace {

std::string GroupNames(const TopicInfo& t) {
  std::vector<std::string> names;
  for (const TopicSubscriber& s : t.groups) names.push_back(s.group);
  return names.empty() ? "-" : absl::StrJoin(names, ",");
}

// `counted`: with each group's waiting items (topic describe).
std::string TopicJson(const TopicInfo& t, bool counted) {
  std::vector<std::string> groups;
  for (const TopicSubscriber& s : t.groups) {
    groups.push_back(absl::StrCat(
        "{\"group\":", JsonString(s.group),
        ",\"subscribed_at\":", JsonString(absl::FormatTime(s.subscribed_at)),
        counted ? absl::StrCat(",\"waiting\":", s.waiting,
                               ",\"oldest_seconds\":", Seconds(s.oldest_age))
                : "",
        "}"));
  }
  const std::string published =
      t.published < 0 ? "null" : absl::StrCat(t.published);
  return absl::StrCat("{\"topic\":", JsonString(t.name), ",\"created_at\":",
                      JsonString(absl::FormatTime(t.created_at)),
                      ",\"created_by\":", JsonString(t.created_by),
                      counted ? absl::StrCat(",\"published\":", published) : "",
                      ",\"groups\":[", absl::StrJoin(groups, ","), "]}");
}

}  // namespace

absl::Status RunTopicCreate(const Args& args) {
  ASSIGN_OR_RETURN(auto admin, ConnectAdmin());
  RETURN_IF_ERROR(admin->CreateTopic(args[0]));
  Print(absl::StrCat("created topic ", args[0],
                     "; a group reads it from its subscription on: `sqlgroup "
                     "group create G --topic ",
                     args[0], "` or `sqlgroup group alter G --topic ", args[0],
                     "`\n"));
  return absl::OkStatus();
}

absl::Status RunTopicDelete(const Args& args) {
  ASSIGN_OR_RETURN(auto admin, ConnectAdmin());
  RETURN_IF_ERROR(admin->DeleteTopic(args[0]));
  Print(absl::StrCat("deleted topic ", args[0], "\n"));
  return absl::OkStatus();
}

absl::Status RunTopicList(const Args&) {
  ASSIGN_OR_RETURN(auto admin, ConnectAdmin());
  ASSIGN_OR_RETURN(const std::vector<TopicInfo> topics, admin->ListTopics());
  if (absl::GetFlag(FLAGS_json)) {
    std::vector<std::string> rows;
    for (const TopicInfo& t : topics) {
      rows.push_back(TopicJson(t, /*counted=*/false));
    }
    Print(absl::StrCat("[", absl::StrJoin(rows, ","), "]\n"));
    return absl::OkStatus();
  }
  std::string out =
      absl::StrFormat("%-32s  %-23s  %s\n", "TOPIC", "CREATED", "GROUPS");
  for (const TopicInfo& t : topics) {
    absl::StrAppend(&out,
                    absl::StrFormat("%-32s  %-23s  %s\n", t.name,
                                    TimeText(t.created_at), GroupNames(t)));
  }
  Print(out);
  return absl::OkStatus();
}

absl::Status RunTopicDescribe(const Args& args) {
  ASSIGN_OR_RETURN(auto admin, ConnectAdmin());
  ASSIGN_OR_RETURN(const TopicInfo t, admin->DescribeTopic(args[0]));
  if (absl::GetFlag(FLAGS_json)) {
    Print(absl::StrCat(TopicJson(t, /*counted=*/true), "\n"));
    return absl::OkStatus();
  }
  std::string out = absl::StrCat(
      "TOPIC ", t.name, "  created ", TimeText(t.created_at), " by ",
      t.created_by, "  groups=", t.groups.size(),
      t.published < 0 ? "" : absl::StrCat("  published=", t.published), "\n");
  if (t.groups.empty()) {
    absl::StrAppend(&out,
                    "no group reads it: a publish is refused until one "
                    "subscribes (`sqlgroup group alter G --topic ",
                    t.name, "`)\n");
  } else {
    absl::StrAppend(&out, absl::StrFormat("%-32s  %-23s  %10s  %10s\n", "GROUP",
                                          "SUBSCRIBED", "WAITING", "OLDEST_S"));
    for (const TopicSubscriber& s : t.groups) {
      absl::StrAppend(&out,
                      absl::StrFormat("%-32s  %-23s  %10d  %10.1f\n", s.group,
                                      TimeText(s.subscribed_at), s.waiting,
                                      absl::ToDoubleSeconds(s.oldest_age)));
    }
  }
  Print(out);
  return absl::OkStatus();
}

}  // namespace sqlgroup::cli
