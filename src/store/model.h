// The values the member runtime and the store pass between them: a group's
// settings, who owns which part, a heartbeat's reply, a take's reference.
// Plain data with no pqxx, so the pure cores (rebalance_plan,
// part_scheduler) and the unit tests' fakes use them without a database.
#ifndef SQLGROUP_STORE_MODEL_H_
#define SQLGROUP_STORE_MODEL_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace sqlgroup::store {

struct GroupSettings {
  int parts = 0;
  absl::Duration ttl;
  absl::Duration heartbeat;
  // groups.ordering = 'key': a key's items are handed out one at a time,
  // in enqueue order (keyed_claims.cc); 'none': the sweep in key order.
  bool key_order = true;
  // groups.assignor: the name of the group's assignor (AssignorNamed).
  std::string assignor = "lexical";
};

struct Owner {
  int part = 0;
  std::string session;
  int64_t epoch = 0;
  // From TakeParts: when the part's previous owner died (its session was
  // reaped, or a live static session replaced by a new process under its
  // name), database clock; unset after a clean handover. Items it may
  // have been running then come back without an outcome.
  std::optional<absl::Time> predecessor_died_at;
};

// Who owns what, as one member needs to know it: its own parts with their
// epochs, and which parts other sessions own and whose they are (read per
// session, not per part: 4,096 session ids per read were most of the
// read's cost).
struct Ownership {
  std::map<int, int64_t> mine;
  std::vector<int> others;
  std::map<int, std::string> owner_of;  // the parts in `others`
};

// Live sessions (lexical order) and current ownership, read in one snapshot.
struct GroupView {
  GroupSettings settings;
  std::vector<std::string> live_sessions;
  // The instance name of each live static member's session (schema 8).
  std::map<std::string, std::string> static_instances;
  // Static members that stopped and keep their place: instance -> when
  // their parts move (database clock).
  std::map<std::string, absl::Time> away_until;
  // Sessions of the group that expired and wait to be reaped.
  int expired_sessions = 0;
  // The live sessions' count and newest creation time (see Beat).
  std::string membership;
  Ownership ownership;  // as seen by the session that read it
};

// What a heartbeat that got through reports about the group, from the same
// statement: what a member needs to stay idle without reading the view.
struct Beat {
  GroupSettings settings;  // current, so ALTERs reach running members
  // The rest only from a watched heartbeat (left at these defaults by any
  // other).
  // Until the earliest other session expires unless it heartbeats
  // (negative: one already has), by the database clock; infinite when the
  // member is alone.
  absl::Duration next_expiry = absl::InfiniteDuration();
  // The live sessions' count and newest creation time, this one included,
  // as in GroupView::membership: a change nobody announced (a member that
  // does not NOTIFY) shows here at the next watched heartbeat. Every join is
  // newer than every live session, and a leave alone lowers the count.
  std::string membership;
};

struct SessionInfo {
  std::string host;
  int pid = 0;
  std::string instance;  // empty: none
  // > 0 (with an instance): a static member (schema 8), which replaces the
  // session of its instance when it registers and, when it stops, stays
  // away for this long with its parts instead of leaving.
  absl::Duration static_timeout = absl::ZeroDuration();
  // Record this binary's version in the session (a schema of 14 or newer,
  // which has the columns).
  bool record_version = false;
  // Store the SHA-256 of `secret` in the session (a schema of 19 or newer):
  // only a transaction that knows the secret may end it while it lives.
  std::string secret;  // empty: none
};

struct Registered {
  std::string session;
  // A static member took the place of an earlier session of its instance.
  bool replaced = false;
};

// One take of a part: the claim on every item read in its range, and what
// every ack, release and dead-letter is fenced on.
struct ClaimRef {
  std::string group;
  std::string session;
  int part = 0;
  int64_t epoch = 0;
};

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_MODEL_H_
