// `sqlgroup dead ...`, `items ...`, `group pause|resume`: the operations
// on a group's items (sqlgroup/operations.h), as text for a person or
// --json for a script.
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "cli/command_line.h"
#include "cli/describe_format.h"
#include "cli/flags.h"
#include "cli/subcommands.h"
#include "sqlgroup/admin.h"
#include "status_macros.h"
#include "utf8.h"

namespace sqlgroup::cli {
namespace {

std::string TimeJson(absl::Time t) {
  return JsonString(
      absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", t, absl::UTCTimeZone()));
}

std::string KeyText(const std::optional<std::string>& key) {
  return key ? *key : "-";
}
std::string KeyJson(const std::optional<std::string>& key) {
  return key ? JsonString(*key) : "null";
}

// The first line of `text`, cut to `width` characters with "...".
std::string OneLine(const std::string& text, size_t width) {
  std::string line = text.substr(0, text.find('\n'));
  if (line.size() > width) line = line.substr(0, width - 3) + "...";
  return line;
}

// Whether `bytes` read as text: well-formed UTF-8 (utf8.h) without control
// characters but tab, newline and carriage return.
bool ReadsAsText(const std::string& bytes) {
  for (size_t i = 0; i < bytes.size();) {
    const unsigned char c = bytes[i];
    if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') return false;
    const size_t len = Utf8SequenceAt(bytes, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

// The payload as text when it reads as text, else base64, and which.
std::pair<std::string, std::string> PayloadShown(const std::string& bytes) {
  if (ReadsAsText(bytes)) return {"text", bytes};
  return {"base64", absl::Base64Escape(bytes)};
}

std::optional<std::string> KeyFlag() {
  if (!FlagGiven("key")) return std::nullopt;
  return absl::GetFlag(FLAGS_key);
}

// --since: an RFC 3339 time, or an age (how long ago).
absl::StatusOr<std::optional<absl::Time>> SinceFlag() {
  const std::string text = absl::GetFlag(FLAGS_since);
  if (text.empty()) return std::nullopt;
  absl::Time t;
  std::string error;
  if (absl::ParseTime(absl::RFC3339_full, text, &t, &error)) return t;
  absl::Duration ago;
  if (absl::ParseDuration(text, &ago) && ago >= absl::ZeroDuration()) {
    return absl::Now() - ago;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--since=", text,
      ": expected a time such as 2026-11-28T10:00:00Z or an age such as "
      "90m (that long ago)"));
}

// The dead letters a requeue or a purge names: the ids after the group,
// or --key, --error (requeue), --older_than (purge) or --all.
DeadSelection SelectionFlags(const Args& args) {
  DeadSelection s;
  s.ids.assign(args.begin() + 1, args.end());
  s.key = KeyFlag();
  s.all = absl::GetFlag(FLAGS_all);
  return s;
}

// What a selection names, for a sentence ("--key k1").
std::string SelectionText(const DeadSelection& s) {
  if (!s.ids.empty()) return absl::StrCat(s.ids.size(), " id(s) given");
  if (s.key) return absl::StrCat("--key ", *s.key);
  if (!s.error.empty()) return absl::StrCat("--error '", s.error, "'");
  if (s.older_than) {
    return absl::StrCat("--older_than ", absl::FormatDuration(*s.older_than));
  }
  return "--all";
}

// Nothing matched a filter: an error (a typo is the likely cause); with
// --all, an empty group of dead letters is no error.
absl::Status NothingMatched(const std::string& group, const DeadSelection& s,
                            const std::string& verb) {
  const std::string text =
      absl::StrCat("no dead letter of group ", group, " matches ",
                   SelectionText(s), "; nothing was ", verb,
                   " (`sqlgroup dead list ", group, "` shows them)\n");
  if (s.all) {
    Print(text);
    return absl::OkStatus();
  }
  return absl::NotFoundError(text.substr(0, text.size() - 1));
}

}  // namespace

absl::Status RunDeadList(const Args& args) {
  DeadFilter filter;
  filter.key = KeyFlag();
  filter.error = absl::GetFlag(FLAGS_error);
  ASSIGN_OR_RETURN(filter.since, SinceFlag());
  filter.limit = absl::GetFlag(FLAGS_limit);
  ASSIGN_OR_RETURN(auto admin, ConnectAdmin());
  ASSIGN_OR_RETURN(const std::vector<DeadItem> dead,
                   admin->ListDead(args[0], filter));
  if (absl::GetFlag(FLAGS_json)) {
    std::vector<std::string> rows;
    for (const DeadItem& d : dead) {
      rows.push_back(absl::StrCat(
          "{\"id\":", JsonString(d.id), ",\"key\":", KeyJson(d.key),
          ",\"attempts\":", d.attempts,
          ",\"enqueued_at\":", TimeJson(d.enqueued_at),
          ",\"died_at\":", TimeJson(d.died_at), ",\"waiting_after\":",
          d.waiting_after ? absl::StrCat(*d.waiting_after) : "null",
          ",\"last_error\":", JsonString(d.last_error), "}"));
    }
    Print(absl::StrCat("[", absl::StrJoin(rows, ","), "]\n"));
    return absl::OkStatus();
  }
  if (dead.empty()) {
    Print(absl::StrCat("group ", args[0], " has no dead letters",
                       filter.key || !filter.error.empty() || filter.since
                           ? " that match"
                           : "",
                       "\n"));
    return absl::OkStatus();
  }
  std::string out =
      absl::StrFormat("%-36s  %-16s  %8s  %-23s  %13s  %s\n", "ID", "KEY",
                      "ATTEMPTS", "DIED AT", "WAITING AFTER", "LAST ERROR");
  for (const DeadItem& d : dead) {
    absl::StrAppend(
        &out, absl::StrFormat(
                  "%-36s  %-16s  %8d  %-23s  %13s  %s\n", d.id,
                  OneLine(KeyText(d.key), 16), d.attempts, TimeText(d.died_at),
                  d.waiting_after ? absl::StrCat(*d.waiting_after) : "-",
                  OneLine(d.last_error, 100)));
  }
  if (static_cast<int>(dead.size()) == filter.limit) {
    absl::StrAppend(&out, "(the first ", filter.limit,
                    "; --limit shows more)\n");
  }
  Print(out);
  return absl::OkStatus();
}

absl::Status RunDeadShow(const Args& args) {
  ASSIGN_OR_RETURN(auto admin, ConnectAdmin());
  ASSIGN_OR_RETURN(const DeadItem d, admin->ShowDead(args[0], args[1]));
  const auto [encoding, payload] = PayloadShown(d.payload);
  if (absl::GetFlag(FLAGS_json)) {
    Print(absl::StrCat("{\"id\":", JsonString(d.id), ",\"key\":",
                       KeyJson(d.key), ",\"attempts\":", d.attempts,
                       ",\"enqueued_at\":", TimeJson(d.enqueued_at),
                       ",\"died_at\":", TimeJson(d.died_at),
                       ",\"last_error\":", JsonString(d.last_error),
                       ",\"payload_encoding\":", JsonString(encoding),
                       ",\"payload\":", JsonString(payload), "}\n"));
    return absl::OkStatus();
  }
  Print(absl::StrCat("id:          ", d.id, "\nkey:         ", KeyText(d.key),
                     "\nattempts:    ", d.attempts,
                     "\nenqueued at: ", TimeText(d.enqueued_at),
                     "\ndied at:     ", TimeText(d.died_at),
                     "\nlast error:  ", d.last_error, "\npayload (", encoding,
                     ", ", d.payload.size(), " bytes):\n", payload, "\n"));
  return absl::OkStatus();
}

absl::Status RunDeadRequeue(const Args& args) {
  DeadSelection selection = SelectionFlags(args);
  selection.error = absl::GetFlag(FLAGS_error);
  const std::string position_flag = absl::GetFlag(FLAGS_position);
  RequeuePosition position;
  if (position_flag == "original") {
    position = RequeuePosition::kOriginal;
  } else if (position_flag == "tail") {
    position = RequeuePosition::kTail;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--position=", position_flag,
        ": use original (back at its old place in its key, ahead of the "
        "key's later items still waiting) or tail (after its key's last "
        "item)"));
  }
  const bool dry_run = absl::GetFlag(FLAGS_dry_run);
  ASSIGN_OR_RETURN(auto admin, ConnectAdmin());
  ASSIGN_OR_RETURN(const std::vector<RequeuedItem> requeued,
                   admin->RequeueDead(args[0], selection, position, dry_run));
  if (requeued.empty()) return NothingMatched(args[0], selection, "requeued");
  std::string out;
  for (const RequeuedItem& r : requeued) {
    absl::StrAppend(&out, r.id, "  key ", KeyText(r.key),
                    r.id == r.new_id ? "" : absl::StrCat("  -> ", r.new_id),
                    "\n");
  }
  absl::StrAppend(&out, dry_run ? "would requeue " : "requeued ",
                  requeued.size(), " dead letter(s) into group ", args[0],
                  position == RequeuePosition::kOriginal
                      ? " at their original places in their keys"
                      : " after their keys' last items",
                  dry_run ? " (--dry_run: nothing was changed)" : "", "\n");
  Print(out);
  return absl::OkStatus();
}

absl::Status RunDeadPurge(const Args& args) {
  DeadSelection selection = SelectionFlags(args);
  if (FlagGiven("older_than")) {
    selection.older_than = absl::GetFlag(FLAGS_older_than);
  }
  const bool dry_run = absl::GetFlag(FLAGS_dry_run);
  ASSIGN_OR_RETURN(auto admin, ConnectAdmin());
  ASSIGN_OR_RETURN(const std::vector<DeadItem> purged,
                   admin->PurgeDead(args[0], selection, dry_run));
  if (purged.empty()) return NothingMatched(args[0], selection, "purged");
  std::string out;
  for (const DeadItem& d : purged) {
    absl::StrAppend(&out, d.id, "  key ", KeyText(d.key), "  died ",
                    TimeText(d.died_at), "\n");
  }
  absl::StrAppend(&out, dry_run ? "would purge " : "purged ", purged.size(),
                  " dead letter(s) of group ", args[0],
                  dry_run ? " (--dry_run: nothing was changed)" : "", "\n");
  Print(out);
  return absl::OkStatus();
}

namespace {

std::string WaitingJson(const WaitingItem& w, bool whole) {
  const auto [encoding, payload] = PayloadShown(w.payload);
  return absl::StrCat(
      "{\"id\":", JsonString(w.id), ",\"key\":", KeyJson(w.key),
      ",\"part\":", w.part, ",\"attempts\":", w.attempts,
      ",\"due_at\":", TimeJson(w.due_at),
      ",\"enqueued_at\":", TimeJson(w.enqueued_at),
      ",\"payload_bytes\":", w.payload_bytes,
      ",\"payload_encoding\":", JsonString(encoding),
      whole ? ",\"payload\":" : ",\"payload_preview\":", JsonString(payload),
      ",\"last_error\":", JsonString(w.last_error),
      ",\"requeued_at\":", w.requeued_at ? TimeJson(*w.requeued_at) : "null",
      "}");
}

}  // namespace

absl::Status RunItemsList(const Args& args) {
  ItemFilter filter;
  filter.key = KeyFlag();
  if (FlagGiven("part")) filter.part = absl::GetFlag(FLAGS_part);
  filter.limit = absl::GetFlag(FLAGS_limit);
  ASSIGN_OR_RETURN(auto admin, ConnectAdmin());
  ASSIGN_OR_RETURN(const std::vector<WaitingItem> items,
                   admin->ListItems(args[0], filter));
  if (absl::GetFlag(FLAGS_json)) {
    std::vector<std::string> rows;
    for (const WaitingItem& w : items) rows.push_back(WaitingJson(w, false));
    Print(absl::StrCat("[", absl::StrJoin(rows, ","), "]\n"));
    return absl::OkStatus();
  }
  if (items.empty()) {
    Print(absl::StrCat("group ", args[0], " has no waiting items",
                       filter.key || filter.part ? " that match" : "", "\n"));
    return absl::OkStatus();
  }
  std::string out =
      absl::StrFormat("%-36s  %-16s  %5s  %8s  %-23s  %s\n", "ID", "KEY",
                      "PART", "ATTEMPTS", "DUE AT", "PAYLOAD");
  const absl::Time now = absl::Now();
  for (const WaitingItem& w : items) {
    const auto [encoding, payload] = PayloadShown(w.payload);
    absl::StrAppend(
        &out, absl::StrFormat(
                  "%-36s  %-16s  %5d  %8d  %-23s  %s%s\n", w.id,
                  OneLine(KeyText(w.key), 16), w.part, w.attempts,
                  w.due_at <= now ? "now" : TimeText(w.due_at),
                  encoding == "text"
                      ? OneLine(payload, 40)
                      : absl::StrCat("(", w.payload_bytes, " bytes, binary)"),
                  w.requeued_at ? "  (requeued)" : ""));
  }
  if (static_cast<int>(items.size()) == filter.limit) {
    absl::StrAppend(&out, "(the first ", filter.limit,
                    " in key order; --limit shows more)\n");
  }
  Print(out);
  return absl::OkStatus();
}

absl::Status RunItemsShow(const Args& args) {
  ASSIGN_OR_RETURN(auto admin, ConnectAdmin());
  ASSIGN_OR_RETURN(const WaitingItem w, admin->ShowItem(args[0], args[1]));
  if (absl::GetFlag(FLAGS_json)) {
    Print(WaitingJson(w, true) + "\n");
    return absl::OkStatus();
  }
  const auto [encoding, payload] = PayloadShown(w.payload);
  Print(absl::StrCat(
      "id:          ", w.id, "\nkey:         ", KeyText(w.key),
      "\npart:        ", w.part, "\nattempts:    ", w.attempts,
      "\ndue at:      ", TimeText(w.due_at),
      "\nenqueued at: ", TimeText(w.enqueued_at),
      "\nlast error:  ", w.last_error.empty() ? "-" : w.last_error,
      w.requeued_at ? absl::StrCat("\nrequeued at: ", TimeText(*w.requeued_at))
                    : "",
      "\npayload (", encoding, ", ", w.payload_bytes, " bytes):\n", payload,
      "\n"));
  return absl::OkStatus();
}

absl::Status RunItemsCancel(const Args& args) {
  ItemSelection selection;
  selection.ids.assign(args.begin() + 1, args.end());
  selection.key = KeyFlag();
  if (selection.ids.empty() == !selection.key.has_value()) {
    return absl::InvalidArgumentError(
        "items cancel needs either the ids of waiting items or --key K; "
        "nothing was changed (`sqlgroup items list GROUP` shows them)");
  }
  const bool dry_run = absl::GetFlag(FLAGS_dry_run);
  ASSIGN_OR_RETURN(auto admin, ConnectAdmin());
  ASSIGN_OR_RETURN(const std::vector<CancelledItem> cancelled,
                   admin->CancelItems(args[0], selection, dry_run));
  if (absl::GetFlag(FLAGS_json)) {
    std::vector<std::string> rows;
    for (const CancelledItem& c : cancelled) {
      rows.push_back(absl::StrCat(
          "{\"id\":", JsonString(c.id), ",\"key\":", KeyJson(c.key),
          ",\"part\":", c.part, ",\"attempts\":", c.attempts,
          ",\"may_be_running\":", c.may_be_running ? "true" : "false", "}"));
    }
    Print(absl::StrCat("[", absl::StrJoin(rows, ","), "]\n"));
    return absl::OkStatus();
  }
  std::string out;
  int running = 0;
  for (const CancelledItem& c : cancelled) {
    running += c.may_be_running;
    absl::StrAppend(&out, c.id, "  key ", KeyText(c.key), "  part ", c.part,
                    c.may_be_running ? "  (may be with a handler now)" : "",
                    "\n");
  }
  absl::StrAppend(
      &out, dry_run ? "would cancel " : "cancelled ", cancelled.size(),
      " item(s) of group ", args[0],
      dry_run ? " (--dry_run: nothing was changed)"
              : absl::StrCat("; they are dead letters now (`sqlgroup dead "
                             "requeue ",
                             args[0], " ID...` with the ids above undoes it)"),
      "\n");
  if (running > 0) {
    absl::StrAppend(
        &out, running,
        " of them may have been with a handler: its acknowledgement is "
        "refused and the writes of its acknowledging transaction roll back, "
        "but an exec or http handler's outside effect may still happen\n");
  }
  Print(out);
  return absl::OkStatus();
}

namespace {

absl::Status SetPaused(const Args& args, bool pause) {
  const std::optional<std::string> key = KeyFlag();
  ASSIGN_OR_RETURN(auto admin, ConnectAdmin());
  ASSIGN_OR_RETURN(const bool changed, pause
                                           ? admin->PauseGroup(args[0], key)
                                           : admin->ResumeGroup(args[0], key));
  const std::string what =
      key ? absl::StrCat("key '", *key, "' of group ", args[0])
          : absl::StrCat("group ", args[0]);
  if (!changed) {
    Print(absl::StrCat(what, pause ? " was paused already" : " was not paused",
                       "; nothing changed\n"));
  } else if (pause) {
    Print(absl::StrCat(
        "paused ", what,
        ": no claim returns its items from now on (items already read or in "
        "a handler finish); `sqlgroup group resume ",
        args[0], key ? absl::StrCat(" --key ", ShellWord(*key)) : "",
        "` resumes\n"));
  } else {
    Print(absl::StrCat("resumed ", what, "; its members were woken\n"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunGroupPause(const Args& args) { return SetPaused(args, true); }
absl::Status RunGroupResume(const Args& args) { return SetPaused(args, false); }

}  // namespace sqlgroup::cli
