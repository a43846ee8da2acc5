#include "cli/commands.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <regex>
#include <set>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/command_line.h"
#include "cli/describe_format.h"
#include "cli/flags.h"
#include "cli/subcommands.h"
#include "dsn.h"
#include "sqlgroup/admin.h"
#include "sqlgroup/assignor.h"
#include "status_macros.h"

namespace sqlgroup::cli {

absl::StatusOr<std::unique_ptr<Admin>> ConnectAdmin() {
  AdminOptions options;
  options.dsn = ResolveDsn(absl::GetFlag(FLAGS_dsn));
  options.migrations_dir = absl::GetFlag(FLAGS_migrations_dir);
  return Admin::Connect(options);
}

void Print(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

namespace {

struct Command {
  std::string synopsis;
  std::vector<std::string> flags;
  int positional;  // number of arguments after the command words
  std::function<absl::Status(const Args&)> run;
  bool more = false;  // `positional` or more (ids)
};

absl::Status Migrate(const Args&) {
  ASSIGN_OR_RETURN(auto admin, ConnectAdmin());
  MigrateOptions options;
  options.force = absl::GetFlag(FLAGS_force);
  ASSIGN_OR_RETURN(MigrateResult r, admin->Migrate(options));
  for (const std::string& member : r.fenced) {
    Print(absl::StrCat("fenced (--force): ", member, "\n"));
  }
  if (r.applied.empty()) {
    Print(absl::StrCat("schema is up to date at version ", r.to_version, "\n"));
  } else {
    Print(absl::StrCat("schema migrated from version ", r.from_version, " to ",
                       r.to_version, " (applied ",
                       absl::StrJoin(r.applied, ", "), ")\n"));
  }
  return absl::OkStatus();
}

// --on_dead, parsed; the error names the flag.
absl::StatusOr<OnDead> OnDeadFlag() {
  const std::string text = absl::GetFlag(FLAGS_on_dead);
  absl::StatusOr<OnDead> on_dead = ParseOnDead(text);
  if (!on_dead.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--on_dead=", text, ": ", on_dead.status().message()));
  }
  return on_dead;
}

absl::Status GroupCreate(const Args& args) {
  const std::string ordering_flag = absl::GetFlag(FLAGS_ordering);
  const absl::StatusOr<Ordering> ordering = ParseOrdering(ordering_flag);
  if (!ordering.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ordering=", ordering_flag, ": ", ordering.status().message()));
  }
  const std::string assignor = absl::GetFlag(FLAGS_assignor);
  if (!AssignorNamed(assignor)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--assignor=", assignor,
        ": not an assignor; use lexical (contiguous blocks of parts in the "
        "lexical order of the members) or sticky (balanced, moving only "
        "what a join or a leave needs)"));
  }
  GroupConfig config;
  config.name = args[0];
  config.parts = absl::GetFlag(FLAGS_parts);
  config.session_ttl = absl::GetFlag(FLAGS_ttl);
  config.heartbeat_interval = absl::GetFlag(FLAGS_heartbeat);
  config.ordering = *ordering;
  config.assignor = assignor;
  config.dead_retention = absl::GetFlag(FLAGS_dead_retention);
  ASSIGN_OR_RETURN(config.on_dead, OnDeadFlag());
  config.topic = absl::GetFlag(FLAGS_topic);
  if (config.topic == "none") config.topic.clear();
  // Checked before connecting, in the flags' names: the library's
  // messages name the GroupConfig fields.
  if (absl::Status s = config.Validate(); !s.ok()) {
    std::string text(s.message());
    for (const char* field :
         {"parts ", "ttl ", "heartbeat ", "dead_retention ", "on_dead "}) {
      if (absl::StartsWith(text, field)) text = "--" + text;
    }
    return absl::InvalidArgumentError(text);
  }
  ASSIGN_OR_RETURN(auto admin, ConnectAdmin());
  RETURN_IF_ERROR(admin->CreateGroup(config));
  Print(absl::StrCat(
      "created group ", config.name, " with ", config.parts,
      " parts, ordering ", OrderingName(config.ordering), ", assignor ",
      config.assignor,
      config.on_dead == OnDead::kHold ? ", keys held behind their dead letters"
                                      : "",
      config.dead_retention > absl::ZeroDuration()
          ? absl::StrCat(", dead letters kept ",
                         absl::FormatDuration(config.dead_retention))
          : "",
      config.topic.empty()
          ? ""
          : absl::StrCat(", reading topic ", config.topic, " from now on"),
      "\n"));
  return absl::OkStatus();
}

absl::Status GroupLeave(const Args& args) {
  const std::string instance = absl::GetFlag(FLAGS_instance);
  if (instance.empty()) {
    return absl::InvalidArgumentError(
        "group leave needs --instance NAME: the static member to remove");
  }
  ASSIGN_OR_RETURN(auto admin, ConnectAdmin());
  RETURN_IF_ERROR(admin->LeaveGroup(args[0], instance,
                                    {.force = absl::GetFlag(FLAGS_force)}));
  Print(absl::StrCat("instance ", instance, " left group ", args[0],
                     "; its parts move at once\n"));
  return absl::OkStatus();
}

absl::Status GroupAlter(const Args& args) {
  std::optional<absl::Duration> ttl, heartbeat;
  if (FlagGiven("ttl")) ttl = absl::GetFlag(FLAGS_ttl);
  if (FlagGiven("heartbeat")) heartbeat = absl::GetFlag(FLAGS_heartbeat);
  const bool resize = FlagGiven("parts");
  const int parts = absl::GetFlag(FLAGS_parts);
  std::optional<absl::Duration> retention;
  if (FlagGiven("dead_retention")) {
    retention = absl::GetFlag(FLAGS_dead_retention);
    // Checked before connecting, in the flag's name (a bad group name is
    // the library's to report).
    GroupConfig check;
    check.name = args[0];
    check.dead_retention = *retention;
    if (absl::Status s = check.Validate();
        absl::StartsWith(s.message(), "dead_retention ")) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", s.message(), "; nothing was changed"));
    }
  }
  std::optional<OnDead> on_dead;
  if (FlagGiven("on_dead")) {
    ASSIGN_OR_RETURN(on_dead, OnDeadFlag());
  }
  std::optional<std::optional<std::string>> topic;  // nullopt inside: none
  if (FlagGiven("topic")) {
    const std::string t = absl::GetFlag(FLAGS_topic);
    if (t.empty()) {
      return absl::InvalidArgumentError(
          "--topic names no topic; give a topic's name, or `none` to stop "
          "reading the group's topic; nothing was changed");
    }
    topic.emplace();
    if (t != "none") *topic = t;
  }
  if (!ttl && !heartbeat && !resize && !retention && !on_dead && !topic) {
    return absl::InvalidArgumentError(
        "group alter needs --parts, --ttl, --heartbeat, --dead_retention, "
        "--on_dead and/or --topic");
  }
  if (resize && (parts < 1 || parts > 4096)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--parts must be between 1 and 4096, got ", parts,
                     "; nothing was changed"));
  }
  ASSIGN_OR_RETURN(auto admin, ConnectAdmin());
  // First: the changes a schema before 18 refuses, before any other.
  if (on_dead) {
    RETURN_IF_ERROR(admin->AlterOnDead(args[0], *on_dead));
    Print(*on_dead == OnDead::kHold
              ? absl::StrCat("group ", args[0],
                             ": a key whose item dies from now on waits "
                             "until its dead letter is requeued or purged\n")
              : absl::StrCat("group ", args[0],
                             ": a key whose item dies goes on with its next "
                             "item; keys held were released\n"));
  }
  if (retention) {
    RETURN_IF_ERROR(admin->AlterDeadRetention(args[0], *retention));
    Print(*retention > absl::ZeroDuration()
              ? absl::StrCat("group ", args[0], " keeps its dead letters ",
                             absl::FormatDuration(*retention),
                             "; its members remove older ones\n")
              : absl::StrCat("group ", args[0],
                             " keeps its dead letters until they are "
                             "requeued or purged\n"));
  }
  if (topic) {
    ASSIGN_OR_RETURN(const bool changed, admin->SetGroupTopic(args[0], *topic));
    Print(!changed ? absl::StrCat("group ", args[0],
                                  " reads no topic; nothing to change\n")
          : *topic ? absl::StrCat("group ", args[0], " reads topic ", **topic,
                                  ": it receives what is published from now "
                                  "on\n")
                   : absl::StrCat("group ", args[0],
                                  " no longer reads its topic; the items it "
                                  "holds stay\n"));
  }
  if (ttl || heartbeat) {
    RETURN_IF_ERROR(admin->AlterGroup(args[0], ttl, heartbeat));
    Print(absl::StrCat("altered group ", args[0], "\n"));
  }
  if (resize) {
    ASSIGN_OR_RETURN(PartsChange change, admin->AlterParts(args[0], parts));
    if (change.from_parts == change.to_parts) {
      Print(absl::StrCat("group ", args[0], " already has ", parts,
                         " parts; nothing to change\n"));
    } else {
      Print(absl::StrCat(
          "group ", args[0], ": parts ", change.from_parts, " -> ",
          change.to_parts,
          ". Running members drain and drop their old parts, then take the "
          "new ones; no item moves. `sqlgroup group describe ",
          args[0], "` shows the change until it is done\n"));
    }
  }
  return absl::OkStatus();
}

absl::Status GroupDelete(const Args& args) {
  ASSIGN_OR_RETURN(auto admin, ConnectAdmin());
  ASSIGN_OR_RETURN(
      const DeletedGroup deleted,
      admin->DeleteGroup(args[0], {.force = absl::GetFlag(FLAGS_force)}));
  Print(absl::StrCat("deleted group ", args[0], " with ", deleted.items,
                     " waiting item(s) and ", deleted.dead_items,
                     " dead letter(s)\n"));
  return absl::OkStatus();
}

absl::Status GroupList(const Args&) {
  ASSIGN_OR_RETURN(auto admin, ConnectAdmin());
  ASSIGN_OR_RETURN(auto groups, admin->ListGroups());
  Print(absl::GetFlag(FLAGS_json) ? GroupListJson(groups)
                                  : GroupListText(groups));
  return absl::OkStatus();
}

absl::Status GroupDescribe(const Args& args) {
  ASSIGN_OR_RETURN(auto admin, ConnectAdmin());
  ASSIGN_OR_RETURN(GroupDescription d, admin->DescribeGroup(args[0]));
  Print(absl::GetFlag(FLAGS_json) ? DescriptionJson(d) : DescriptionText(d));
  return absl::OkStatus();
}

absl::Status Grant(const Args&) {
  RoleGrants roles;
  roles.member_role = absl::GetFlag(FLAGS_member_role);
  roles.producer_role = absl::GetFlag(FLAGS_producer_role);
  roles.operator_role = absl::GetFlag(FLAGS_operator_role);
  if (roles.member_role.empty() && roles.producer_role.empty() &&
      roles.operator_role.empty()) {
    return absl::InvalidArgumentError(
        "grant needs --member_role, --producer_role and/or --operator_role");
  }
  // --group may be repeated, and each may list several: a,b.
  for (const std::string& value : FlagValues("group")) {
    for (absl::string_view g : absl::StrSplit(value, ',', absl::SkipEmpty())) {
      roles.groups.emplace_back(g);
    }
  }
  for (const std::string& value : FlagValues("topic")) {
    for (absl::string_view t : absl::StrSplit(value, ',', absl::SkipEmpty())) {
      roles.topics.emplace_back(t);
    }
  }
  if (FlagGiven("topic") && roles.topics.empty()) {
    return absl::InvalidArgumentError(
        "--topic names no topic; give a topic's name or a pattern (`*` "
        "alone is every topic), or leave --topic out");
  }
  if (FlagGiven("group") && roles.groups.empty()) {
    // An empty variable must not widen a grant to every group.
    return absl::InvalidArgumentError(
        "--group names no group; give a group's name or a pattern (`*` "
        "alone is every group), or leave --group out to grant every group");
  }
  ASSIGN_OR_RETURN(auto admin, ConnectAdmin());
  RETURN_IF_ERROR(admin->GrantRoles(roles));
  const std::string which =
      roles.groups.empty()
          ? "every group (also those created later; --group limits it)"
          : absl::StrCat(roles.groups.size() == 1 ? "group " : "groups ",
                         absl::StrJoin(roles.groups, ", "), " only");
  for (const auto& [kind, role] :
       {std::pair<const char*, const std::string&>{"member", roles.member_role},
        {"producer", roles.producer_role},
        {"operator", roles.operator_role}}) {
    if (role.empty()) continue;
    Print(absl::StrCat("granted ", kind, " privileges to ", role, " for ",
                       which, "\n"));
  }
  if (!roles.producer_role.empty()) {
    Print(absl::StrCat(
        roles.producer_role, " may publish to ",
        !roles.topics.empty()
            ? absl::StrCat(roles.topics.size() == 1 ? "topic " : "topics ",
                           absl::StrJoin(roles.topics, ", "), " only")
        : roles.groups.empty() ? "every topic (--topic limits it)"
                               : "no topic (--topic T allows it)",
        "\n"));
  }
  return absl::OkStatus();
}

const std::map<std::string, Command>& Commands() {
  static const auto* const kCommands = new std::map<std::string, Command>{
      {"migrate",
       {"migrate [--force] [--migrations_dir DIR]",
        {"force", "migrations_dir"},
        0,
        Migrate}},
      {"grant",
       {"grant [--member_role ROLE] [--producer_role ROLE] [--operator_role "
        "ROLE] [--group G]... [--topic T]...  (least privileges, for the "
        "groups G, names or patterns with *; all groups without --group; "
        "--topic: what the producer may publish to; again after each "
        "migrate)",
        {"member_role", "producer_role", "operator_role", "group", "topic"},
        0,
        Grant}},
      {"group create",
       {"group create NAME [--parts 16] [--ttl 5s] [--heartbeat 1s] "
        "[--ordering key|none] [--assignor lexical|sticky] "
        "[--dead_retention D] [--on_dead release|hold] [--topic T]",
        {"parts", "ttl", "heartbeat", "ordering", "assignor", "dead_retention",
         "on_dead", "topic"},
        1,
        GroupCreate}},
      {"group alter",
       {"group alter NAME [--parts P] [--ttl D] [--heartbeat D] "
        "[--dead_retention D] [--on_dead release|hold] [--topic T|none]  "
        "(--parts changes a live group's part count, up or down; no item "
        "moves)",
        {"parts", "ttl", "heartbeat", "dead_retention", "on_dead", "topic"},
        1,
        GroupAlter}},
      {"group delete",
       {"group delete NAME [--force]  (--force: also when items or dead "
        "letters would go with it)",
        {"force"},
        1,
        GroupDelete}},
      {"group leave",
       {"group leave NAME --instance I [--force]  (a stopped static member "
        "leaves for good; its parts move at once)",
        {"instance", "force"},
        1,
        GroupLeave}},
      {"group list", {"group list [--json]", {"json"}, 0, GroupList}},
      {"group describe",
       {"group describe NAME [--json]", {"json"}, 1, GroupDescribe}},
      {"produce",
       {"produce (--group NAME | --topic T) ([--key K] --payload "
        "TEXT|--payload_file F | "
        "--input FILE|- [--format text|json] [--key_delimiter '\\t'] | "
        "--generate [--count 1000] [--keys K] [--payload_bytes B] [--rate "
        "R]) [--delay D] [--print_ids] [--retry_for 60s]",
        {"group", "topic", "key", "payload", "payload_file", "input", "format",
         "key_delimiter", "delay", "print_ids", "generate", "count", "keys",
         "payload_bytes", "rate", "notify", "retry_for", "pool_mode"},
        0,
        RunProduce}},
      {"consume",
       {"consume --group NAME [--handler sql:FUNCTION|sql:STATEMENT|exec:CMD|"
        "http://URL [--handler_headers "
        "FILE]|noop|count|record|sleep:D|fail:RATE] "
        "[--handler_timeout 30s] [--drain_timeout D] "
        "[--fail_rate R] [--instance NAME [--static_timeout D]] "
        "[--workers 2] [--members 1] [--max_connections N] [--batch] "
        "[--sql_calls_per_commit 1] "
        "[--max_attempts 25] [--backoff_initial 1s] [--backoff_max 10m] "
        "[--metrics_addr 127.0.0.1:9464] [--pool_mode auto|direct|transaction "
        "[--listen_dsn DSN]]",
        {"group",
         "handler",
         "handler_timeout",
         "drain_timeout",
         "handler_headers",
         "fail_rate",
         "instance",
         "static_timeout",
         "workers",
         "members",
         "claim_batch",
         "max_attempts",
         "backoff_initial",
         "backoff_max",
         "batch",
         "notify",
         "metrics_addr",
         "pool_mode",
         "listen_dsn",
         "max_connections",
         "idle_connection_timeout",
         "sql_calls_per_commit"},
        0,
        RunConsume}},
      {"demo", {"demo [--duration 60s]", {"duration"}, 0, RunDemo}},
      {"dead list",
       {"dead list GROUP [--key K] [--error TEXT] [--since T] [--limit 100] "
        "[--json]",
        {"key", "error", "since", "limit", "json"},
        1,
        RunDeadList}},
      {"dead show", {"dead show GROUP ID [--json]", {"json"}, 2, RunDeadShow}},
      {"dead requeue",
       {"dead requeue GROUP (ID... | --key K | --error TEXT | --all) "
        "[--position original|tail] [--dry_run]",
        {"key", "error", "all", "position", "dry_run"},
        1,
        RunDeadRequeue,
        true}},
      {"dead purge",
       {"dead purge GROUP (ID... | --key K | --older_than D | --all) "
        "[--dry_run]",
        {"key", "older_than", "all", "dry_run"},
        1,
        RunDeadPurge,
        true}},
      {"items list",
       {"items list GROUP [--key K] [--part N] [--limit 100] [--json]",
        {"key", "part", "limit", "json"},
        1,
        RunItemsList}},
      {"items show",
       {"items show GROUP ID [--json]", {"json"}, 2, RunItemsShow}},
      {"items cancel",
       {"items cancel GROUP (ID... | --key K) [--dry_run] [--json]  (moves "
        "waiting items to the dead letters, safely against running members)",
        {"key", "dry_run", "json"},
        1,
        RunItemsCancel,
        true}},
      {"group pause",
       {"group pause GROUP [--key K]  (no claim returns an item of the "
        "group, or of the key, until resumed; items in flight finish)",
        {"key"},
        1,
        RunGroupPause}},
      {"group resume",
       {"group resume GROUP [--key K]", {"key"}, 1, RunGroupResume}},
      {"topic create",
       {"topic create NAME  (a stream several groups read, each with its own "
        "parts, members and retries; sqlgroup.publish writes to it)",
        {},
        1,
        RunTopicCreate}},
      {"topic delete",
       {"topic delete NAME  (refused while a group reads it)",
        {},
        1,
        RunTopicDelete}},
      {"topic list", {"topic list [--json]", {"json"}, 0, RunTopicList}},
      {"topic describe",
       {"topic describe NAME [--json]  (the groups that read it, with their "
        "waiting items)",
        {"json"},
        1,
        RunTopicDescribe}},
      {"postgres",
       {"postgres [--port 0] [--data_dir DIR | --keep] [--durable]  (a "
        "private PostgreSQL until SIGINT/SIGTERM; prints its DSN)",
        {"durable", "port", "data_dir", "keep"},
        0,
        RunPostgres}},
  };
  return *kCommands;
}

}  // namespace

const char* UsageText() {
  static const std::string* const kUsage = [] {
    std::string s =
        "a Kafka-style consumer-group coordinator over SQL.\n\n"
        "Usage: sqlgroup COMMAND [ARGS] [FLAGS]\n\nCommands:\n";
    for (const auto& [name, c] : Commands()) {
      absl::StrAppend(&s, "  sqlgroup ", c.synopsis, "\n");
    }
    absl::StrAppend(&s,
                    "\nEvery command takes --dsn (else $SQLGROUP_DSN, else "
                    "libpq's PG* variables) and --log_level.\n"
                    "`sqlgroup COMMAND --help` shows a command's flags with "
                    "their defaults; each flag can also come from the "
                    "environment (SQLGROUP_ + its name in upper case).\n");
    return new std::string(s);
  }();
  return kUsage->c_str();
}

namespace {

// The command named by the longest run of leading words ("group create"),
// and how many words that took.
std::pair<const Command*, size_t> FindCommand(const Args& words) {
  for (size_t n = std::min<size_t>(2, words.size()); n >= 1; --n) {
    auto it =
        Commands().find(absl::StrJoin(words.begin(), words.begin() + n, " "));
    if (it != Commands().end()) return {&it->second, n};
  }
  return {nullptr, 0};
}

std::vector<std::string> WithCommonFlags(std::vector<std::string> flags) {
  flags.insert(flags.end(), CommonFlags().begin(), CommonFlags().end());
  return flags;
}

// A flag's help without the "consume: " that says which command takes it
// (the command's help says that).
std::string FlagMeaning(const std::string& help) {
  static const std::regex kPrefix("^[a-z/ ]+: ");
  return std::regex_replace(help, kPrefix, "",
                            std::regex_constants::format_first_only);
}

}  // namespace

std::vector<std::string> KnownFlags() {
  std::set<std::string> all;
  for (const auto& [name, c] : Commands()) {
    for (const std::string& f : WithCommonFlags(c.flags)) all.insert(f);
  }
  return {all.begin(), all.end()};
}

std::vector<std::string> FlagsOfCommand(const Args& words) {
  const auto [command, n] = FindCommand(words);
  if (command == nullptr) return {};
  return WithCommonFlags(command->flags);
}

std::vector<std::string> EnvironmentFlagsOfCommand(const Args& words) {
  const auto [command, n] = FindCommand(words);
  if (command == nullptr) return {};
  const std::string name = absl::StrJoin(words.begin(), words.begin() + n, " ");
  // What an operation acts on is typed each time: a SQLGROUP_KEY or
  // SQLGROUP_ALL left in the environment must not turn `group pause G`
  // into a key's pause, or `dead purge G` into a purge of everything.
  const bool operation = absl::StartsWith(name, "dead ") ||
                         absl::StartsWith(name, "items ") ||
                         name == "group pause" || name == "group resume";
  static const std::set<std::string> kSelectors = {
      "key", "all", "error", "older_than", "since", "part"};
  std::vector<std::string> out;
  for (const std::string& flag : WithCommonFlags(command->flags)) {
    // ResolveDsn reads SQLGROUP_DSN itself, to say where a DSN came from.
    if (flag == "dsn" || (operation && kSelectors.count(flag))) continue;
    // A SQLGROUP_GROUP meant for consume must not scope a grant.
    if (name == "grant" && (flag == "group" || flag == "topic")) continue;
    out.push_back(flag);
  }
  return out;
}

std::string CommandHelp(const Args& words) {
  const auto [command, n] = FindCommand(words);
  if (command == nullptr) return UsageText();
  std::string out =
      absl::StrCat("usage: sqlgroup ", command->synopsis, "\n\nflags:\n");
  const std::vector<std::string> from_env = EnvironmentFlagsOfCommand(words);
  for (const std::string& name : WithCommonFlags(command->flags)) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr) continue;
    const bool env =
        name == "dsn" ||
        std::find(from_env.begin(), from_env.end(), name) != from_env.end();
    std::string default_value = flag->DefaultValue();
    if (flag->IsOfType<std::string>()) {
      default_value = absl::StrCat("\"", default_value, "\"");
    }
    absl::StrAppend(
        &out, "  --", name, " (default ", default_value, "; ",
        env ? absl::StrCat("$", EnvironmentName(name)) : "command line only",
        ")\n      ", FlagMeaning(flag->Help()), "\n");
  }
  absl::StrAppend(
      &out,
      "\nA flag may be spelt with dashes (--log-level) or underscores "
      "(--log_level), as --name=value or --name value. Each can also come "
      "from the environment variable shown (a flag given overrides it); "
      "--dsn also from libpq's PG* variables.\n");
  return out;
}

std::string UsageReminder(const Args& words) {
  const auto [command, n] = FindCommand(words);
  if (command == nullptr) return UsageText();
  return absl::StrCat("usage: sqlgroup ", command->synopsis, "\n(`sqlgroup ",
                      absl::StrJoin(words.begin(), words.begin() + n, " "),
                      " --help` lists its flags)\n");
}

absl::Status RunCommand(const Args& args) {
  if (args.empty()) {
    return absl::InvalidArgumentError("no command given");
  }
  // The longest run of leading words that names a command: "group create".
  for (size_t words = std::min<size_t>(2, args.size()); words >= 1; --words) {
    const std::string name =
        absl::StrJoin(args.begin(), args.begin() + words, " ");
    auto it = Commands().find(name);
    if (it == Commands().end()) continue;
    const Command& c = it->second;
    const Args rest(args.begin() + words, args.end());
    RETURN_IF_ERROR(CheckFlagsApply(name, c.flags));
    if (static_cast<int>(rest.size()) != c.positional &&
        !(c.more && static_cast<int>(rest.size()) > c.positional)) {
      return absl::InvalidArgumentError(
          absl::StrCat("usage: sqlgroup ", c.synopsis));
    }
    return c.run(rest);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown command '", absl::StrJoin(args, " "), "'"));
}

}  // namespace sqlgroup::cli
