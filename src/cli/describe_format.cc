#include "cli/describe_format.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"

namespace sqlgroup::cli {
namespace {

// "abcd1234" of a session id, or "-" when none.
std::string Short(const std::string& session) {
  return session.empty() ? "-" : session.substr(0, 8);
}

// The group's keys blocked behind a retry, and the oldest blocked head.
int64_t BlockedKeys(const GroupDescription& d) {
  int64_t total = 0;
  for (const PartInfo& p : d.parts) total += p.blocked_keys;
  return total;
}
absl::Duration OldestBlocked(const GroupDescription& d) {
  absl::Duration oldest;
  for (const PartInfo& p : d.parts) {
    oldest = std::max(oldest, p.oldest_blocked_age);
  }
  return oldest;
}

// live, static (a static member running), away (a static member that
// stopped and keeps its place and parts for a while) or expired.
const char* StateName(const MemberInfo& m) {
  if (m.expired) return "expired";
  if (m.away_left) return "away";
  return m.static_timeout > absl::ZeroDuration() ? "static" : "live";
}

// The state, with the seconds an away member has left.
std::string MemberState(const MemberInfo& m) {
  if (m.expired || !m.away_left) return StateName(m);
  return absl::StrFormat("away %.1fs", absl::ToDoubleSeconds(*m.away_left));
}

// The last change of the part count, or null.
std::string PartsChangeJson(const std::optional<PartsChange>& c) {
  if (!c) return "null";
  return absl::StrCat(
      "{\"from\":", c->from_parts, ",\"to\":", c->to_parts,
      ",\"at\":", JsonString(absl::FormatTime(c->at)),
      ",\"old_parts_owned\":", c->old_parts_owned,
      ",\"in_progress\":", c->old_parts_owned > 0 ? "true" : "false", "}");
}

}  // namespace

std::string Seconds(absl::Duration d) {
  return absl::StrFormat("%.3f", absl::ToDoubleSeconds(d));
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (const unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string TimeText(absl::Time t) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", t, absl::UTCTimeZone());
}

std::string ShellWord(const std::string& s) {
  return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "'\\''"}}), "'");
}

// "none" when dead letters are kept until requeued or purged.
std::string RetentionText(absl::Duration retention) {
  return retention > absl::ZeroDuration() ? absl::FormatDuration(retention)
                                          : "none";
}

// null when dead letters are kept until requeued or purged.
std::string RetentionJson(absl::Duration retention) {
  return retention > absl::ZeroDuration() ? Seconds(retention) : "null";
}

// "-" when the group reads no topic.
std::string TopicText(const std::string& topic) {
  return topic.empty() ? "-" : topic;
}

// null when the group reads no topic.
std::string TopicJson(const std::string& topic) {
  return topic.empty() ? "null" : JsonString(topic);
}

std::string DescriptionText(const GroupDescription& d) {
  std::string out = absl::StrFormat(
      "GROUP %s  parts=%d  ordering=%s  assignor=%s  ttl=%s  heartbeat=%s  "
      "members=%d  dead_items=%d  dead_retention=%s  on_dead=%s  topic=%s  "
      "schema=%d\n",
      d.config.name, d.config.parts, OrderingName(d.config.ordering),
      d.config.assignor, absl::FormatDuration(d.config.session_ttl),
      absl::FormatDuration(d.config.heartbeat_interval), d.members.size(),
      d.dead_items, RetentionText(d.config.dead_retention),
      OnDeadName(d.config.on_dead), TopicText(d.config.topic),
      d.schema_version);
  for (const Pause& p : d.pauses) {
    absl::StrAppend(&out,
                    p.key ? absl::StrCat("PAUSED key ", JsonString(*p.key))
                          : std::string("PAUSED (the whole group)"),
                    " since ", TimeText(p.paused_at), " by ", p.paused_by,
                    " (`sqlgroup group resume ", d.config.name,
                    p.key ? absl::StrCat(" --key ", ShellWord(*p.key)) : "",
                    "` resumes it)\n");
  }
  if (const auto& c = d.last_parts_change) {
    const std::string at = TimeText(c->at);
    out += c->old_parts_owned > 0
               ? absl::StrFormat(
                     "PARTS CHANGING %d -> %d since %s: %d part(s) of the "
                     "%d-part layout still owned, draining\n",
                     c->from_parts, c->to_parts, at, c->old_parts_owned,
                     c->from_parts)
               : absl::StrFormat("parts changed %d -> %d at %s\n",
                                 c->from_parts, c->to_parts, at);
  }
  out += "\nMEMBERS\n";
  // STATE: see StateName; "away 12.5s" says how long the parts still wait.
  // CONNS: connections held now / the process's budget, as the member
  // last reported them ("-": not yet). VERSION: the member's release and
  // newest schema ("-": a release before 0.15, or the schema is older than 14).
  out +=
      absl::StrFormat("%-36s  %-16s  %-20s  %7s  %9s  %-13s  %6s  %-11s  %s\n",
                      "SESSION", "INSTANCE", "HOST", "PID", "HEARTBEAT",
                      "STATE", "CONNS", "VERSION", "PARTS");
  if (d.members.empty()) out += "(none)\n";
  int held = 0;
  for (const MemberInfo& m : d.members) {
    std::vector<std::string> parts;
    for (int p : m.parts) parts.push_back(absl::StrCat(p));
    const std::string conns =
        m.connections
            ? absl::StrCat(*m.connections, "/", m.connection_budget.value_or(0))
            : "-";
    held += m.connections.value_or(0);
    const std::string version =
        m.version.empty() ? "-" : absl::StrCat(m.version, "/", m.schema);
    out += absl::StrFormat(
        "%-36s  %-16s  %-20s  %7d  %8ss  %-13s  %6s  %-11s  %s\n", m.session_id,
        m.instance.empty() ? "-" : m.instance, m.host, m.pid,
        Seconds(m.since_heartbeat), MemberState(m), conns, version,
        absl::StrJoin(parts, ","));
  }
  out += absl::StrFormat("CONNECTIONS %d held by the members\n", held);
  for (const MemberInfo& m : d.members) {
    if (!m.circuit_open_for) continue;
    out += absl::StrFormat(
        "CIRCUIT OPEN %s for %ss: its handler fails every item, which wait "
        "(last error: %s)\n",
        m.instance.empty() ? m.session_id : m.instance,
        Seconds(*m.circuit_open_for), m.circuit_error);
  }
  out += "\nPARTS\n";
  // BLOCKED: keys whose head waits for a retry, holding back the key's
  // later items (ordering key). REVOKING_S: how long the owner has been
  // handing the part over, waiting for its handler calls on it to return.
  out += absl::StrFormat("%5s  %-8s  %-16s  %8s  %10s  %10s  %8s  %10s\n",
                         "PART", "OWNER", "INSTANCE", "EPOCH", "LAG",
                         "OLDEST_S", "BLOCKED", "REVOKING_S");
  int64_t total = 0;
  for (const PartInfo& p : d.parts) {
    total += p.waiting_items;
    out +=
        absl::StrFormat("%5d  %-8s  %-16s  %8s  %10d  %10s  %8d  %10s\n",
                        p.part, Short(p.owner_session),
                        p.owner_instance.empty() ? "-" : p.owner_instance,
                        p.epoch == 0 ? "-" : absl::StrCat(p.epoch),
                        p.waiting_items, Seconds(p.oldest_age), p.blocked_keys,
                        p.revoking_for ? Seconds(*p.revoking_for) : "-");
  }
  out += absl::StrFormat("TOTAL LAG %d\n", total);
  out += absl::StrFormat("BLOCKED KEYS %d (oldest blocked head %ss)\n",
                         BlockedKeys(d), Seconds(OldestBlocked(d)));
  return out;
}

std::string DescriptionJson(const GroupDescription& d) {
  std::vector<std::string> members;
  for (const MemberInfo& m : d.members) {
    members.push_back(absl::StrCat(
        "{\"session\":", JsonString(m.session_id),
        ",\"instance\":", JsonString(m.instance),
        ",\"host\":", JsonString(m.host), ",\"pid\":", m.pid,
        ",\"created_at\":", JsonString(absl::FormatTime(m.created_at)),
        ",\"seconds_since_heartbeat\":", Seconds(m.since_heartbeat),
        ",\"expired\":", m.expired ? "true" : "false",
        ",\"state\":", JsonString(StateName(m)), ",\"static_timeout_seconds\":",
        m.static_timeout > absl::ZeroDuration() ? Seconds(m.static_timeout)
                                                : "null",
        ",\"away_seconds_left\":", m.away_left ? Seconds(*m.away_left) : "null",
        ",\"connections\":",
        m.connections ? absl::StrCat(*m.connections) : "null",
        ",\"connection_budget\":",
        m.connection_budget ? absl::StrCat(*m.connection_budget) : "null",
        ",\"circuit_open_seconds\":",
        m.circuit_open_for ? Seconds(*m.circuit_open_for) : "null",
        ",\"circuit_error\":",
        m.circuit_open_for ? JsonString(m.circuit_error) : "null",
        ",\"version\":", m.version.empty() ? "null" : JsonString(m.version),
        ",\"schema\":", m.schema > 0 ? absl::StrCat(m.schema) : "null",
        ",\"parts\":[", absl::StrJoin(m.parts, ","), "]}"));
  }
  std::vector<std::string> parts;
  for (const PartInfo& p : d.parts) {
    parts.push_back(absl::StrCat(
        "{\"part\":", p.part, ",\"owner\":",
        p.owner_session.empty() ? "null" : JsonString(p.owner_session),
        ",\"instance\":", JsonString(p.owner_instance), ",\"epoch\":", p.epoch,
        ",\"lag_items\":", p.waiting_items, ",\"oldest_age_seconds\":",
        Seconds(p.oldest_age), ",\"blocked_keys\":", p.blocked_keys,
        ",\"oldest_blocked_seconds\":", Seconds(p.oldest_blocked_age),
        ",\"revoking_seconds\":",
        p.revoking_for ? Seconds(*p.revoking_for) : "null",
        ",\"first_key\":", JsonString(p.first_key),
        ",\"last_key\":", JsonString(p.last_key), "}"));
  }
  bool group_paused = false;
  std::vector<std::string> paused_keys;
  for (const Pause& p : d.pauses) {
    if (p.key) {
      paused_keys.push_back(JsonString(*p.key));
    } else {
      group_paused = true;
    }
  }
  return absl::StrCat(
      "{\"group\":", JsonString(d.config.name),
      ",\"paused\":", group_paused ? "true" : "false", ",\"paused_keys\":[",
      absl::StrJoin(paused_keys, ","), "]", ",\"part_count\":", d.config.parts,
      ",\"ordering\":", JsonString(OrderingName(d.config.ordering)),
      ",\"assignor\":", JsonString(d.config.assignor),
      ",\"parts_change\":", PartsChangeJson(d.last_parts_change),
      ",\"ttl_seconds\":", Seconds(d.config.session_ttl),
      ",\"heartbeat_seconds\":", Seconds(d.config.heartbeat_interval),
      ",\"dead_items\":", d.dead_items,
      ",\"dead_retention_seconds\":", RetentionJson(d.config.dead_retention),
      ",\"on_dead\":", JsonString(OnDeadName(d.config.on_dead)),
      ",\"topic\":", TopicJson(d.config.topic),
      ",\"blocked_keys\":", BlockedKeys(d),
      ",\"oldest_blocked_seconds\":", Seconds(OldestBlocked(d)),
      ",\"schema_version\":", d.schema_version,
      ",\"members_from\":", d.members_from, ",\"members\":[",
      absl::StrJoin(members, ","), "],\"parts\":[", absl::StrJoin(parts, ","),
      "]}\n");
}

std::string GroupListText(const std::vector<GroupConfig>& groups) {
  std::string out =
      absl::StrFormat("%-32s  %6s  %-8s  %-8s  %10s  %10s  %-14s  %-7s  %s\n",
                      "GROUP", "PARTS", "ORDERING", "ASSIGNOR", "TTL",
                      "HEARTBEAT", "DEAD_RETENTION", "ON_DEAD", "TOPIC");
  for (const GroupConfig& g : groups) {
    out +=
        absl::StrFormat("%-32s  %6d  %-8s  %-8s  %10s  %10s  %-14s  %-7s  %s\n",
                        g.name, g.parts, OrderingName(g.ordering), g.assignor,
                        absl::FormatDuration(g.session_ttl),
                        absl::FormatDuration(g.heartbeat_interval),
                        RetentionText(g.dead_retention), OnDeadName(g.on_dead),
                        TopicText(g.topic));
  }
  return out;
}

std::string GroupListJson(const std::vector<GroupConfig>& groups) {
  std::vector<std::string> rows;
  for (const GroupConfig& g : groups) {
    rows.push_back(absl::StrCat(
        "{\"group\":", JsonString(g.name), ",\"parts\":", g.parts,
        ",\"ordering\":", JsonString(OrderingName(g.ordering)),
        ",\"assignor\":", JsonString(g.assignor),
        ",\"ttl_seconds\":", Seconds(g.session_ttl),
        ",\"heartbeat_seconds\":", Seconds(g.heartbeat_interval),
        ",\"dead_retention_seconds\":", RetentionJson(g.dead_retention),
        ",\"on_dead\":", JsonString(OnDeadName(g.on_dead)),
        ",\"topic\":", TopicJson(g.topic), "}"));
  }
  return absl::StrCat("[", absl::StrJoin(rows, ","), "]\n");
}

}  // namespace sqlgroup::cli
