#include "cli/flags.h"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sqlgroup/consumer.h"

ABSL_FLAG(std::string, dsn, "",
          "libpq connection string (keyword/value or URI). Default: "
          "$SQLGROUP_DSN, else libpq's PG* environment variables");
ABSL_FLAG(std::string, migrations_dir, "",
          "migrate: read NNN_name.sql files from this folder instead of the "
          "migrations built into the binary");
ABSL_FLAG(bool, force, false,
          "migrate: apply the migrations even when live members could not "
          "run against the new schema; their sessions end and they stop "
          "taking items (docs/UPGRADING.md). group delete: delete a group "
          "even when it holds waiting items or dead letters. group leave: "
          "end a static member's session even while its process runs");
ABSL_FLAG(int32_t, parts, 16, "group create: number of parts P (1..4096)");
ABSL_FLAG(std::string, ordering, "key",
          "group create: key (the items of a key are handled one at a time, "
          "in enqueue order) or none (items of a key may run concurrently)");
ABSL_FLAG(std::string, assignor, "lexical",
          "group create: lexical (contiguous blocks of parts in the lexical "
          "order of the members) or sticky (balanced, moving only what a "
          "join or a leave needs)");
ABSL_FLAG(absl::Duration, ttl, absl::Seconds(5),
          "group create/alter: session TTL, e.g. 5s; a silent member's parts "
          "move after this long");
ABSL_FLAG(absl::Duration, heartbeat, absl::Seconds(1),
          "group create/alter: heartbeat interval, at most ttl/2");
ABSL_FLAG(absl::Duration, dead_retention, absl::ZeroDuration(),
          "group create/alter: remove the group's dead letters this long "
          "after they died, e.g. 168h (0: keep them until requeued or "
          "purged)");
ABSL_FLAG(std::string, on_dead, "release",
          "group create/alter: what a key does when one of its items dies: "
          "release (its next item goes on) or hold (it waits until the dead "
          "letter is requeued or purged; ordering key only)");
ABSL_FLAG(std::string, topic, "",
          "group create/alter: the topic the group reads (`none` in group "
          "alter: it stops reading its topic); produce: publish to this "
          "topic (every group that reads it gets each item) instead of "
          "--group");
ABSL_FLAG(bool, json, false,
          "group describe/list, topic describe/list: print JSON");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(60),
          "demo: how long the demo runs");
ABSL_FLAG(std::string, group, "",
          "produce/consume: the consumer group; grant: the groups the roles "
          "may act on (a name or a pattern with *; repeat it, or a,b)");
ABSL_FLAG(std::string, handler, "noop",
          "consume: the work each item gets: sql:FUNCTION (called by the "
          "statement that acknowledges the item, with key, payload, id) or "
          "sql:STATEMENT (in the acknowledging transaction, $1 key, $2 "
          "payload, $3 id), "
          "exec:'CMD ARGS' (a long-lived process, one JSON item per line in, "
          "ok|retry REASON|dead REASON out), http(s)://HOST:PORT/PATH (POST "
          "per item), or a demo handler: noop, count[:DURATION], "
          "record[:DURATION], sleep:DURATION, fail:RATE. See "
          "docs/HANDLERS.md");
ABSL_FLAG(absl::Duration, handler_timeout, absl::Seconds(30),
          "consume: how long an exec or http handler may take for one item "
          "before the attempt fails (the process is restarted, the request "
          "abandoned)");
ABSL_FLAG(absl::Duration, drain_timeout, absl::ZeroDuration(),
          "consume: when a part moves to another member or this one stops, "
          "how long its handler calls in flight may run before they are cut "
          "off (the exec process killed, the request abandoned; the item "
          "retried with the attempt counted). The part moves only after "
          "they returned. 0: --handler_timeout");
ABSL_FLAG(std::string, handler_headers, "",
          "consume: a file of headers for an http handler's requests, one "
          "'Name: value' a line (e.g. Authorization: Bearer TOKEN): "
          "credentials that show neither in ps nor in any message");
ABSL_FLAG(double, fail_rate, 0,
          "consume: the probability (0..1) that a delivery fails before the "
          "handler writes anything, whatever the handler: exercises retries, "
          "backoff and dead-lettering");
ABSL_FLAG(std::string, instance, "",
          "consume: a name for this member, shown by describe and metrics");
ABSL_FLAG(absl::Duration, static_timeout, absl::ZeroDuration(),
          "consume: with --instance, a static member: a restart under the "
          "same name within this long moves no part (its parts wait for "
          "it); 0: dynamic");
ABSL_FLAG(int32_t, workers, 2,
          "consume: worker threads that serve the owned parts, each item "
          "on a connection of its own within --max_connections");
ABSL_FLAG(int32_t, max_connections, 0,
          "consume: the most database connections the process holds to "
          "--dsn: one per member while it runs (lent to its workers between "
          "its rounds), one for the shared heartbeat of --members > 1, and "
          "workers' connections while parts have work (0: those kept, plus "
          "one per worker of one member; an idle member holds 1)");
ABSL_FLAG(absl::Duration, idle_connection_timeout, absl::Seconds(10),
          "consume: a worker's connection is closed after this long without "
          "work");
ABSL_FLAG(int32_t, members, 1,
          "consume: members (sessions) this process runs, each with its own "
          "workers; more than one heartbeat together on one connection");
ABSL_FLAG(int32_t, claim_batch, 64, "consume: items claimed per query");
ABSL_FLAG(int32_t, sql_calls_per_commit, 1,
          "consume: with --handler sql:FUNCTION, up to this many calls on "
          "items of no key share one transaction and one commit, each under "
          "a savepoint of its own (1..32): fewer commits where commits are "
          "slow, still exactly once, but the calls share the transaction's "
          "locks, SET LOCAL and now(). 1: a commit per call. See "
          "docs/HANDLERS.md");
ABSL_FLAG(int32_t, max_attempts, sqlgroup::ConsumerOptions().max_attempts,
          "consume: failed deliveries before an item is dead-lettered (the "
          "defaults ride out an hour's outage: 2 h 37 min from the first "
          "failure to the dead letters; docs/HANDLERS.md)");
ABSL_FLAG(absl::Duration, backoff_initial,
          sqlgroup::ConsumerOptions().backoff_initial,
          "consume: the wait after an item's first failed attempt, doubling "
          "with each further one up to --backoff_max, +-20% jitter; more "
          "than 0");
ABSL_FLAG(absl::Duration, backoff_max, sqlgroup::ConsumerOptions().backoff_max,
          "consume: the longest wait between two attempts of an item, also "
          "the most an http endpoint's Retry-After can ask for; at least "
          "--backoff_initial");
ABSL_FLAG(bool, batch, false,
          "consume: acknowledge each claimed batch in one transaction");
ABSL_FLAG(bool, notify, true,
          "produce/consume: use LISTEN/NOTIFY wakeups (off: poll only)");
ABSL_FLAG(std::string, pool_mode, "auto",
          "produce/consume: how --dsn reaches the database: auto (found out "
          "at start: a pooler in front is taken for one in transaction "
          "mode, and said once in the log), direct (also right through a "
          "pooler in session mode; `session` is another name for it) or "
          "transaction (a pooler in transaction "
          "mode, e.g. PgBouncer's pool_mode = transaction: no named prepared "
          "statements, no session SET; LISTEN only through --listen_dsn, "
          "else polling). See docs/POOLERS.md");
ABSL_FLAG(std::string, listen_dsn, "",
          "consume: a connection string straight to the database to LISTEN "
          "on (one idle connection per member) when --dsn goes through a "
          "pooler in transaction mode; empty: LISTEN on --dsn's connection, "
          "or poll behind such a pooler");
ABSL_FLAG(std::string, key, "",
          "produce: the key of the one item to send (with --payload or "
          "--payload_file), empty: unkeyed; dead, items, group pause and "
          "resume: only that key's items (given, even empty: a key)");
ABSL_FLAG(std::string, payload, "",
          "produce: the payload (text) of the one item to send");
ABSL_FLAG(std::string, payload_file, "",
          "produce: send one item whose payload is this file's bytes");
ABSL_FLAG(absl::Duration, delay, absl::ZeroDuration(),
          "produce: deliver the items sent no earlier than this from now "
          "(a JSON line's own \"delay\" wins)");
ABSL_FLAG(std::string, input, "",
          "produce: read items from this file, one per line (- for "
          "standard input), as --format says; batches go as lines arrive");
ABSL_FLAG(std::string, format, "text",
          "produce --input: text (KEY, --key_delimiter, then the payload; a "
          "line without the delimiter is unkeyed) or json ({\"key\": ..., "
          "\"payload\": ... or \"payload_base64\": ..., \"delay\": ...})");
ABSL_FLAG(std::string, key_delimiter, "\\t",
          "produce --input --format text: what separates the key from the "
          "payload (\\t: a tab; empty: no keys)");
ABSL_FLAG(bool, print_ids, false,
          "produce: print each item's id on standard output, one per line, "
          "in input order");
ABSL_FLAG(bool, generate, false,
          "produce: generate --count items (a load generator: --keys, "
          "--payload_bytes, --rate)");
ABSL_FLAG(int64_t, count, 1000, "produce --generate: number of items");
ABSL_FLAG(absl::Duration, retry_for, absl::Seconds(60),
          "produce: how long to keep trying a batch through a lost "
          "connection, a database restart or a failover (each batch has an "
          "idempotency key: a retry never adds it twice); 0: no retry");
ABSL_FLAG(
    int32_t, keys, 0,
    "produce --generate: give items keys k0..k(K-1) round-robin, tally them in "
    "sqlgroup_demo.produced and number them per key: the payload of "
    "item n of a key (1-based, continuing the key's tally) is n in "
    "decimal, then a space and 'x' up to --payload_bytes, e.g. "
    "\"7 xxxxxxxxxxxxxx\" (0: no keys; payloads are all 'x')");
ABSL_FLAG(
    int32_t, payload_bytes, 16,
    "produce --generate: payload size of each item (a keyed item's number is "
    "never cut, so its payload may be longer)");
ABSL_FLAG(double, rate, 0,
          "produce --generate: items per second (0: as fast as batches "
          "allow)");
ABSL_FLAG(std::string, metrics_addr, "127.0.0.1:9464",
          "consume: serve Prometheus metrics on http://HOST:PORT/metrics, "
          "and the health probes /healthz and /readyz (port 0: the OS picks "
          "one, logged at start; empty: none of them)");
ABSL_FLAG(bool, durable, false,
          "postgres: keep fsync and synchronous_commit on (slower)");
ABSL_FLAG(int32_t, port, 0,
          "postgres: the port to listen on, on 127.0.0.1 (0: a free one)");
ABSL_FLAG(std::string, data_dir, "",
          "postgres: keep the cluster in this directory (made with initdb "
          "when empty or missing; reused when it holds one) and keep it at "
          "exit; empty: a temporary one, deleted at exit unless --keep");
ABSL_FLAG(bool, keep, false,
          "postgres: keep the temporary data directory at exit (its path "
          "is printed)");
ABSL_FLAG(std::string, member_role, "",
          "grant: the database role members (consume) connect as");
ABSL_FLAG(std::string, producer_role, "",
          "grant: the database role producers (produce) connect as");
ABSL_FLAG(std::string, operator_role, "",
          "grant: the database role operators (dead, items, group pause) "
          "connect as");
ABSL_FLAG(std::string, error, "",
          "dead: only dead letters whose last error contains this text");
ABSL_FLAG(std::string, since, "",
          "dead list: only dead letters that died since then: a time "
          "(2026-11-28T10:00:00Z) or an age (1h: an hour ago)");
ABSL_FLAG(int32_t, limit, 100, "dead list, items list: at most this many");
ABSL_FLAG(bool, all, false, "dead requeue, dead purge: every dead letter");
ABSL_FLAG(std::string, position, "original",
          "dead requeue: original (back at its old place in its key, ahead "
          "of the key's later items still waiting) or tail (after its key's "
          "last item, as if enqueued now)");
ABSL_FLAG(bool, dry_run, false,
          "dead requeue, dead purge: say what would be done, change nothing");
ABSL_FLAG(absl::Duration, older_than, absl::ZeroDuration(),
          "dead purge: the dead letters that died longer ago than this");
ABSL_FLAG(int32_t, part, -1,
          "items list: only the items of this part (of the group's part "
          "count now)");
ABSL_FLAG(std::string, log_level, "info",
          "trace, debug, info, warn, error or off");

namespace sqlgroup::cli {

const std::vector<std::string>& CommonFlags() {
  static const auto* const kCommon =
      new std::vector<std::string>{"dsn", "log_level"};
  return *kCommon;
}

namespace {
// Debian's Abseil keeps IsSpecifiedOnCommandLine() private, so the names
// given are read off argv before parsing.
std::set<std::string>& GivenFlags() {
  static auto* const kGiven = new std::set<std::string>;
  return *kGiven;
}
std::map<std::string, std::vector<std::string>>& GivenValues() {
  static auto* const kValues =
      new std::map<std::string, std::vector<std::string>>;
  return *kValues;
}
}  // namespace

absl::StatusOr<PoolMode> PoolModeFlag() {
  const std::string mode = absl::GetFlag(FLAGS_pool_mode);
  if (mode == "auto") return PoolMode::kAuto;
  if (mode == "direct" || mode == "session") return PoolMode::kDirect;
  if (mode == "transaction") return PoolMode::kTransaction;
  return absl::InvalidArgumentError(absl::StrCat(
      "--pool_mode must be auto (find out at start), direct (also for a "
      "pooler in session mode) or transaction (a pooler in transaction "
      "mode), got '",
      mode, "'"));
}

void RecordGivenFlags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string token = argv[i];
    if (token == "--") break;
    if (token.size() < 2 || token[0] != '-') continue;
    token = token.substr(token[1] == '-' ? 2 : 1);
    const size_t equals = token.find('=');
    if (equals != std::string::npos) {
      GivenValues()[token.substr(0, equals)].push_back(
          token.substr(equals + 1));
    } else if (i + 1 < argc && argv[i + 1][0] != '-') {
      GivenValues()[token].push_back(argv[i + 1]);  // --group orders
    }
    token = token.substr(0, equals);
    if (absl::FindCommandLineFlag(token) == nullptr && token.size() > 2 &&
        token.rfind("no", 0) == 0) {
      token = token.substr(2);  // --nojson
    }
    GivenFlags().insert(token);
  }
}

bool FlagGiven(const std::string& name) { return GivenFlags().count(name); }

std::vector<std::string> FlagValues(const std::string& name) {
  const auto it = GivenValues().find(name);
  if (it == GivenValues().end()) return {};
  return it->second;
}

absl::Status CheckFlagsApply(const std::string& command,
                             const std::vector<std::string>& allowed) {
  std::vector<std::string> ours = allowed;
  ours.insert(ours.end(), CommonFlags().begin(), CommonFlags().end());
  for (const std::string& name : GivenFlags()) {
    if (absl::FindCommandLineFlag(name) == nullptr) continue;
    if (std::find(ours.begin(), ours.end(), name) != ours.end()) continue;
    if (name.rfind("help", 0) == 0 || name == "version") continue;
    std::vector<std::string> shown;
    for (const auto& a : ours) shown.push_back(absl::StrCat("--", a));
    return absl::InvalidArgumentError(
        absl::StrCat("flag --", name, " does not apply to `sqlgroup ", command,
                     "`; it takes ", absl::StrJoin(shown, ", ")));
  }
  return absl::OkStatus();
}

}  // namespace sqlgroup::cli
