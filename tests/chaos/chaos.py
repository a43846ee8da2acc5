#!/usr/bin/env python3
"""sqlgroup's chaos suite: a workload on a primary with a synchronous
standby, faults injected on a seeded schedule, then the invariants of
design.md checked from the final database state and the ownership log.

  tests/chaos/chaos.py --cli build/sqlgroup --profile short --seed 1
  tests/chaos/chaos.py --cli build/sqlgroup --profile long --seeds 1,2,3

Faults: kill -9 of a member (then restarted), SIGSTOP past the TTL (then
SIGCONT), an immediate PostgreSQL restart, pg_terminate_backend of members'
connections, a member's network stalled past the TTL, a graceful rolling
restart, failover to the standby (the primary killed, the standby
promoted, a new standby built), and changes of the part count (group alter
--parts: 16 -> 40 -> 8 -> 16, a member killed and restarted during the
middle one), and the producer's connection cut right after three of its
COMMITs reached the server (commit_cut: the batches committed, the
producer cannot know; producer_mismatch checks none was added twice).
Operations, by a least-privilege operator role: the whole group paused for
2 s (pause), and a key paused, its waiting items cancelled into the dead
letters, requeued at their original places and the key resumed (operate);
delivered_while_paused counts acknowledged deliveries of a paused group
or key that began (results.delivered_at, when the member handed the item
to its handler) more than a second after its pause (must stay 0: a claim
read before the pause is read again once it is 250 ms old), and the
checks above hold through both (key_order: a key's cancelled and requeued
items are handled in their order).

With --pooler transaction the members reach the primary through a private
PgBouncer 1.18 in transaction mode (a server pool smaller than their
connections; consume --pool_mode transaction, LISTEN on a direct
--listen_dsn), failover is left out (the pooler points at one server) and
a pooler_restart fault stops PgBouncer, cutting every client and server
connection, and starts it again. The short profile injects each once; the long one adds random
faults until --minutes have passed. While the group recovers from each, the
current owners are sampled for overlapping key ranges (overlapping_samples).


With --static_timeout D the members are static (consume --static_timeout):
a graceful restart keeps a member's place and parts, and two more faults
run: kill -9 with an immediate restart under the same name, and a zombie
(a member SIGSTOPped, a second process started under its name, which takes
its place at once, then the first SIGCONTed: it must stop with an error
naming the instance, its acknowledgements refused by the fence). Rolling
restarts and both of these must take no part from a member that was not
restarted (bystander_takes, from the ownership log).

Members run the `record` handler behind `--fail_rate` (default 0.05): that
share of deliveries fails before the handler writes, so retries, backoff
and the key blocked behind its failed head run throughout.

With --topic the producer publishes to a topic (sqlgroup.publish) that
two groups read: the group under the faults, and a second one, calm (5
parts, the sticky assignor, two members of its own that no member fault
touches; the database's faults reach it too). Every check runs on each
group, calm's reported with a calm_ prefix: each must acknowledge every
item the producers tallied, once, in key order.
With --handler slow the members run an exec handler slower than any
handover, tests/support/slow_handler.py (consume --handler_timeout 15s,
the default --drain_timeout: the same), on items whose payloads ask for
0.5 to 10 s per attempt (half of them under 8 keys), enqueued at 1 item/s
with sqlgroup.enqueue_many. The faults are kill9, sigstop, join (a new
member), leave (SIGTERM, for good), rolling and resize; the fleet stays
between 2 and --members + 2. handler_overlaps checks invariant 10 from the
handlers' own logs (one per member process): no item ran in two handler
processes at once, except while one of the two members was dead (from its
kill -9 on: its exec child outlives it) or paused (from its SIGSTOP until
it registered again, plus the 0.1 s a cut-off call may outlive its last
log line) to the database. A cut-off call is taken to have run 0.1 s past
its last line. The exec handler writes no results, so the checks that
read them are skipped (checker.RESULT_CHECKS):

  tests/chaos/chaos.py --cli build/sqlgroup --handler slow --profile long \
      --seed 1 --minutes 3

With --handler fast the members run the same handler on items of no work
(payload "0"), about 300 a second, nine in ten unkeyed: the handler writes
nothing in the ack and returns at once, so each worker gathers its acks
and commits many in one statement (issue 43). The faults are those that
cut gathered acks before their commit (kill9, sigstop, stall, terminate,
pg_restart) and the membership changes that move parts under them
(rolling, resize, join, leave). The producer enqueues through psql as
the superuser, and the enqueuing statement writes each id into a tally
table; acked_unhandled counts tallied items acknowledged (not waiting,
not dead-lettered) without a delivery in the handlers' logs that
returned, and the database checks that need no results rows run as for
the slow profile.

With --handler sql the same items and faults go through a SQL function,
public.chaos_note, that notes each call in a table and fails one call in
twenty after its write; members run it with --sql_calls_per_commit 32, so
each worker groups its calls into one transaction under savepoints.
Exactly once is checked from the database alone: noted_twice (an item's
work committed twice), acked_unnoted (acknowledged without its work) and
noted_unacked (work kept for an item still waiting or dead-lettered).

Prints a table and one JSON line per result; exits 1 when an invariant is
broken or the group does not recover.
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import checker  # noqa: E402
from pgnode import BIN, PgNode, make_root, psql  # noqa: E402
from workload import (DEMO_ROLES_SQL, Member, Producer,  # noqa: E402
                      SlowProducer)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
from pgbouncer import PgBouncer  # noqa: E402

KINDS = ["kill9", "sigstop", "pg_restart", "terminate", "stall", "rolling",
         "failover", "resize", "commit_cut", "pause", "operate"]
# One resize fault: the part count 16 -> 40 -> 8 -> 16 (from --parts: x2.5,
# /5, x2), a member killed and restarted during the middle change.
RESIZE_FACTORS = [2.5, 0.2, 2.0]
STATIC_KINDS = ["kill9_return", "zombie"]  # with --static_timeout only
# With --handler slow: membership changes and member deaths while slow
# exec handlers run (invariant 10); no database fault, whose downtime would
# expire every session at once and excuse nothing the suite could name.
SLOW_KINDS = ["kill9", "sigstop", "join", "leave", "rolling", "resize"]
# With --handler fast: the faults that cut a member's gathered acks
# before their commit (its process killed or stopped, its connections
# terminated, stalled or cut by a restart of the server) and the
# membership changes that move parts under them.
FAST_KINDS = ["kill9", "sigstop", "pg_restart", "terminate", "stall",
              "rolling", "resize", "join", "leave"]
# The fast profile's tally: every item enqueued, written by the statement
# that enqueued it.
FAST_TALLY = "chaos_enqueued"
# With --handler sql: the SQL function the members call on each item
# (grouped into one transaction per worker under savepoints), and the
# table it notes each call in, which commits with the item's ack.
SQL_NOTED = "chaos_noted"
SQL_CALLS = f"""
CREATE TABLE {SQL_NOTED} (id uuid NOT NULL,
                          noted_at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION chaos_note(k text, p bytea, i uuid) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO {SQL_NOTED} (id) VALUES (i);
  -- One call in twenty fails after its write: undone to its savepoint
  -- alone (the members' --fail_rate would make it a statement of its own).
  IF random() < 0.05 THEN RAISE EXCEPTION 'injected failure'; END IF;
END $$;
GRANT INSERT ON {SQL_NOTED} TO chaos_member;
"""
SLOW_HANDLER = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                            "..", "support", "slow_handler.py")
# Above the slowest payload (SlowProducer's 10 s); --drain_timeout is left
# at its default, this.
SLOW_HANDLER_TIMEOUT = "15s"
# How long after its last logged line a handler call cut off may have run
# (slow_handler.py logs "alive" every 0.1 s).
CUT_SLACK_S = 0.1
# --topic: the stream both groups read.
TOPIC = "chaos-stream"
GROUP_TTL_S = 2.0
HEARTBEAT_S = 0.4
RECOVERY_LIMIT_S = 30.0


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class ChaosRun:
    def __init__(self, args, seed):
        self.args, self.seed = args, seed
        self.rng = random.Random(seed)
        self.root = make_root()
        self.log_dir = os.path.join(self.root, "logs")
        os.makedirs(self.log_dir)
        self.nodes = []  # the two database slots: a primary and a standby
        self.primary = None
        self.members = []
        self.calm = []  # --topic: the second group's members
        self.producer = None
        self.faults = []  # one dict per injected fault
        self.parts = args.parts  # the group's part count now
        self.key_parts = {}  # part count -> parts_with_keys()
        # Samples of the current owners' ranges taken during recoveries,
        # and how many showed two overlapping (must stay 0).
        self.overlap_samples = 0
        self.overlapping_samples = 0
        self.kinds = KINDS + (STATIC_KINDS if args.static_timeout else [])
        self.bouncer = None
        if args.pooler == "transaction":
            self.kinds = [k for k in self.kinds if k != "failover"]
            self.kinds.append("pooler_restart")
        self.twins = 0  # zombie faults so far (names their logs)
        self.slow = args.handler == "slow"
        if self.slow:
            self.kinds = list(SLOW_KINDS)
        # Items of no work, mostly unkeyed: acks gathered (fast, an exec
        # handler) or a SQL function's calls grouped (sql).
        self.fast = args.handler in ("fast", "sql")
        if self.fast:
            self.kinds = list(FAST_KINDS)
        self.sql_calls = args.handler == "sql"
        # Members run tests/support/slow_handler.py, which logs each
        # delivery: the checks read those logs instead of results rows.
        self.logged = self.slow or args.handler == "fast"
        self.joined = 0  # members added by join faults (names them)
        self.left = []  # members that left for good (leave faults)
        # Handler log (one per member process) -> [(from, to)]: when that
        # process was dead or paused to the database, by the suite's doing
        # (kill -9: from the kill on; SIGSTOP: until it registered again).
        self.unresponsive = {}
        self._tails = {}  # handler log -> (bytes read, latest start seen)
        self.injected = {}  # kind -> faults injected (a resize: 3 changes)
        # Operations: acknowledgements of a paused group or key committed
        # more than a second after its pause (must stay 0); items
        # cancelled and requeued by `operate` faults.
        self.delivered_while_paused = 0
        self.cancelled = self.requeued = 0

    # --- the database ----------------------------------------------------
    def query(self, sql, **kw):
        return psql(self.primary.port, sql, **kw)

    def node_dsn(self, user="postgres"):
        ports = ",".join(str(n.port) for n in self.nodes)
        return (f"host=127.0.0.1,127.0.0.1 port={ports} dbname=chaos "
                f"user={user} target_session_attrs=read-write "
                "connect_timeout=2")

    def setup(self):
        a = PgNode.primary(self.root, "pg-a")
        self.nodes = [a, PgNode.standby_of(a, self.root, "pg-b")]
        self.primary = a
        a.wait_streaming(self.nodes[1])
        a.require_sync_standby(True)
        self.run_cli("migrate", "--dsn", self.node_dsn())
        timing = ["--ttl", f"{GROUP_TTL_S:g}s", "--heartbeat",
                  f"{HEARTBEAT_S * 1000:g}ms", "--dsn", self.node_dsn()]
        subscribed = []
        if self.args.topic:
            self.run_cli("topic", "create", TOPIC, "--dsn", self.node_dsn())
            subscribed = ["--topic", TOPIC]
            self.run_cli("group", "create", "calm", "--parts", "5",
                         "--assignor", "sticky", *timing, *subscribed)
        self.run_cli("group", "create", "chaos", "--parts",
                     str(self.args.parts), *timing, *subscribed)
        self.grant_roles()
        if self.sql_calls:
            self.query(SQL_CALLS)
        # The retry policy the suite's history was measured with (5
        # attempts, 200 ms doubling), not the defaults that ride out an
        # hour's outage: with --fail_rate 0.05 a key's head that failed
        # three times in a row would hold its key 7 s instead of 1.4 s.
        slots = [n.port for n in self.nodes]
        extra = ["--max_attempts", "5", "--backoff_initial", "200ms",
                 "--backoff_max", "60s"]
        if self.bouncer is None and self.args.pooler == "transaction":
            # Fewer server connections than the members' 3 each.
            self.bouncer = PgBouncer(a.port, "transaction", pool_size=6,
                                     users={"chaos_member": ""}).start()
        if self.bouncer:
            slots = [self.bouncer.port]
            extra += ["--pool_mode", "transaction",
                      "--listen_dsn", self.node_dsn("chaos_member")]
        if self.slow:
            extra += ["--handler_timeout", SLOW_HANDLER_TIMEOUT]
        if self.sql_calls:
            extra += ["--sql_calls_per_commit", "32"]
        self.member_slots, self.member_extra = slots, extra
        for i in range(self.args.members):
            self.members.append(self.new_member(f"m{i}"))
        if self.args.topic:
            for i in range(2):
                m = Member(self.args.cli, f"calm{i}", self.member_slots,
                           self.log_dir, "chaos_member", "record", 2,
                           self.args.fail_rate, extra_args=self.member_extra,
                           group="calm")
                m.start()
                self.calm.append(m)
        self.wait("every part owned", lambda: self.owned_by_live([]))
        self.query("CREATE INDEX IF NOT EXISTS results_acked_at "
                   "ON sqlgroup_demo.results (acked_at)")
        self.query("CREATE INDEX IF NOT EXISTS results_delivered_at "
                   "ON sqlgroup_demo.results (delivered_at)")
        if self.slow:
            self.producer = SlowProducer(
                os.path.join(BIN, "psql"), self.node_dsn(),
                random.Random(self.seed + 1))  # not the schedule's
        elif self.fast:
            # About 300 items/s of no work, one in ten under a key: the
            # unkeyed ones' acks gather (issue 43).
            self.query(f"CREATE TABLE {FAST_TALLY} (id uuid PRIMARY KEY)")
            self.producer = SlowProducer(
                os.path.join(BIN, "psql"), self.node_dsn(),
                random.Random(self.seed + 1), batch=30, period=0.1, lo=0.0,
                hi=0.0, keyed=0.1, tally=FAST_TALLY)
        else:
            self.producer = Producer(
                self.args.cli, [n.port for n in self.nodes],
                "chaos_producer", self.args.rate, 200,
                os.path.join(self.log_dir, "producer.log"),
                topic=TOPIC if self.args.topic else None)
        self.producer.start()

    def new_member(self, name):
        """A member started under `name`: the `record` handler, or with
        --handler slow tests/support/slow_handler.py logging to a file of
        each process the member starts. The slow profile's members run 4
        workers: their handler writes nothing in the ack, so their acks
        share commits (SharedCommit) under every fault."""
        handler = (f"exec:python3 {SLOW_HANDLER} {{log}}" if self.logged
                   else "sql:public.chaos_note" if self.sql_calls
                   else "record")
        workers = 4 if self.slow else 2
        m = Member(self.args.cli, name, self.member_slots, self.log_dir,
                   "chaos_member", handler, workers,
                   0.0 if self.sql_calls else self.args.fail_rate,
                   self.args.static_timeout, extra_args=self.member_extra)
        m.start()
        return m

    def grant_roles(self):
        """Members and producers run under least-privilege roles, as users
        should: what `sqlgroup grant` gives, plus the workload's tables."""
        self.run_cli("produce", "--dsn", self.node_dsn(), "--group", "chaos",
                     "--count", "0", "--keys", "1")  # creates sqlgroup_demo
        self.query(DEMO_ROLES_SQL)
        self.run_cli("grant", "--member_role", "chaos_member",
                     "--producer_role", "chaos_producer", "--operator_role",
                     "chaos_operator", "--dsn", self.node_dsn())

    def run_cli(self, *argv):
        r = subprocess.run([self.args.cli, *argv], capture_output=True,
                           text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"sqlgroup {argv[0]} failed: {r.stderr}")
        return r.stdout

    def operate(self, *argv):
        """A command of the operations, as the operator role."""
        return self.run_cli(*argv, "--dsn", self.node_dsn("chaos_operator"))

    def db_time(self, sql="SELECT clock_timestamp()"):
        """The timestamp `sql` returns, in Unix seconds (database clock)."""
        return float(self.query(f"SELECT extract(epoch FROM ({sql}))")[0][0])

    def count_delivered_while_paused(self, paused, resumed, key=None):
        """Acknowledged deliveries (of `key`, or of any key) that began from
        a second after the pause until the resume. An acknowledgement may
        commit later than that (a delivery in flight finishes, and through
        a pooler it may wait for a server), but no delivery may begin."""
        of_key = "" if key is None else f" AND key = '{key}'"
        if int(self.query("SELECT count(*) FROM sqlgroup_demo.results "
                          "WHERE delivered_at IS NULL")[0][0]):
            raise RuntimeError("results without delivered_at: the record "
                               "handler no longer says when it began")
        # The paused group's (--topic: calm runs on).
        n = int(self.query(checker.for_group(
            "SELECT count(*) FROM sqlgroup_demo.results WHERE delivered_at > "
            f"to_timestamp({paused}) + interval '1 second' AND delivered_at < "
            f"to_timestamp({resumed}){of_key}", "chaos"))[0][0])
        if n:
            log(f"seed {self.seed}: {n} delivery(ies) began while paused")
        self.delivered_while_paused += n

    # --- conditions ------------------------------------------------------
    def sessions_of(self, member):
        rows = self.query("SELECT id FROM sqlgroup.sessions WHERE instance = "
                          f"'{member.name}'")
        return [r[0] for r in rows]

    def owned_by_live(self, excluded):
        """Every part owned by a live session not in `excluded`."""
        not_in = "".join(f" AND s.id <> '{s}'" for s in excluded)
        n = self.query(
            "SELECT count(*) FROM sqlgroup.session_parts sp "
            "JOIN sqlgroup.sessions s ON s.id = sp.session_id "
            "JOIN sqlgroup.groups g ON g.name = s.group_name "
            "WHERE sp.group_name = 'chaos' AND sp.parts_of = g.parts "
            "AND s.heartbeated_at > clock_timestamp() - g.session_ttl"
            + not_in, check=False, timeout=3)
        return n is not None and int(n[0][0]) == self.parts

    def parts_acked_since(self, t0):
        """Parts of the current count with an item acknowledged since t0."""
        rows = self.query("SELECT DISTINCT r.part FROM "
                          "sqlgroup_demo.results r JOIN "
                          "sqlgroup.ownership_log l ON l.group_name = 'chaos' "
                          f"AND l.epoch = r.epoch WHERE r.acked_at > "
                          f"to_timestamp({t0}) AND l.parts_of = {self.parts}",
                          check=False, timeout=3)
        return {int(r[0]) for r in rows or []}

    def parts_with_keys(self):
        """Parts of the current count that hold one of the producer's keys
        (a key's items all lie in one part; some parts may hold none)."""
        if self.parts not in self.key_parts:
            rows = self.query("SELECT min(item_id::text) FROM "
                              "sqlgroup_demo.results WHERE key IS NOT NULL "
                              "GROUP BY key")
            parts = {checker.part_of(r[0], self.parts) for r in rows}
            if len(rows) < self.producer.keys:  # not every key seen yet
                return parts
            self.key_parts[self.parts] = parts
        return self.key_parts[self.parts]

    def sample_overlaps(self):
        """Whether two current owners run overlapping key ranges (any part
        counts): the database must make it impossible at every instant."""
        n = self.query(checker.OVERLAPPING_NOW, check=False, timeout=3)
        if n is None:
            return
        self.overlap_samples += 1
        if int(n[0][0]) > 0:
            self.overlapping_samples += 1
            log(f"seed {self.seed}: {n[0][0]} overlapping owner pair(s) now")

    def wait(self, what, cond, timeout=RECOVERY_LIMIT_S):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if cond():
                return
            time.sleep(0.1)
        raise RuntimeError(f"timed out waiting for {what}")

    def settle(self):
        """Waits (at most RECOVERY_LIMIT_S) until no part was taken for a
        second: a static member's restart counts the takes after it as the
        restart's doing, so the rebalances an earlier fault set off (a
        PostgreSQL restart longer than the TTL: every member rejoins) must
        have ended first."""
        self.wait("ownership to settle", lambda: self.query(
            "SELECT count(*) FROM sqlgroup.ownership_log WHERE group_name = "
            "'chaos' AND acquired_at > clock_timestamp() - interval "
            "'1 second'", check=False, timeout=3) == [["0"]])

    def bystander_takes(self, member, t0, excluded):
        """Takes since t0 by sessions other than `member`'s, old
        (`excluded`) or new: what a static member's restart must not cause."""
        mine = excluded + self.sessions_of(member)
        return int(self.query(
            "SELECT count(*) FROM sqlgroup.ownership_log "
            "WHERE group_name = 'chaos' "
            f"AND acquired_at > to_timestamp({t0}) AND session_id::text <> "
            f"ALL('{{{','.join(mine)}}}'::text[])")[0][0])

    def latest_handler_start(self):
        """The latest "start" in the slow handlers' logs (read on from
        where the last call stopped)."""
        latest = 0.0
        for m in self.members:
            for path in m.handler_logs:
                done, seen = self._tails.get(path, (0, 0.0))
                try:
                    with open(path, "rb") as f:
                        f.seek(done)
                        chunk = f.read()
                except FileNotFoundError:
                    continue
                whole = chunk[:chunk.rfind(b"\n") + 1]
                for line in whole.split(b"\n"):
                    if line.startswith(b"start "):
                        seen = max(seen, float(line.split()[4]))
                self._tails[path] = (done + len(whole), seen)
                latest = max(latest, seen)
        return latest

    def latest_note(self):
        """When the sql profile's function last noted an item (0: never,
        or the database cannot say now)."""
        rows = self.query(f"SELECT coalesce(extract(epoch FROM max(noted_at)), "
                          f"0) FROM {SQL_NOTED}", check=False, timeout=3)
        return float(rows[0][0]) if rows else 0.0

    def recover(self, kind, target, t0, excluded, db_back_s=None,
                member=None, until=None):
        """Times from t0 until every part is owned by a live session not in
        `excluded` (and `until()` holds, when given), and until every part
        holding keys has acknowledged an item again (with --handler slow,
        whose handler writes no results: until a handler started an item
        after every part was owned again).
        `db_back_s`: when the database itself was down, how long it took to
        accept connections again (crash recovery or promotion). `member`: a
        static member restarted; counts the takes by the others meanwhile."""
        owned = resumed = None
        deadline = t0 + RECOVERY_LIMIT_S
        while time.time() < deadline and (owned is None or resumed is None):
            self.sample_overlaps()
            if owned is None and self.owned_by_live(excluded) and \
                    (until is None or until()):
                owned = time.time() - t0
            if self.sql_calls:
                if owned is not None and \
                        self.latest_note() > t0 + owned:
                    resumed = time.time() - t0
            elif self.logged:
                if owned is not None and \
                        self.latest_handler_start() > t0 + owned:
                    resumed = time.time() - t0
            elif resumed is None and \
                    self.parts_acked_since(t0) >= self.parts_with_keys():
                resumed = time.time() - t0
            time.sleep(0.1)
        fault = {"seed": self.seed, "kind": kind, "target": target,
                 "owned_s": owned, "resumed_s": resumed,
                 "db_back_s": db_back_s}
        if member is not None:
            fault["bystander_takes"] = self.bystander_takes(member, t0,
                                                            excluded)
        self.faults.append(fault)
        print(json.dumps({"chaos_fault": fault}), flush=True)
        if owned is None or resumed is None:
            raise RuntimeError(f"no recovery within {RECOVERY_LIMIT_S:g} s "
                               f"after {kind} of {target}")

    # --- faults ----------------------------------------------------------
    def pick_member(self):
        return self.rng.choice([m for m in self.members if m.alive()])

    def kill(self, m):
        """kill -9 of a member process, noted: from now on its handler
        calls (an exec child outlives it) belong to a dead member."""
        if m.alive() and m.handler_log:
            self.unresponsive.setdefault(m.handler_log, []).append(
                (time.time(), float("inf")))
        m.kill()

    def fault_kill9(self):
        m = self.pick_member()
        excluded = self.sessions_of(m)
        t0 = time.time()
        self.kill(m)
        self.recover("kill9", m.name, t0, excluded)
        m.start()

    def fault_sigstop(self):
        m = self.pick_member()
        excluded = self.sessions_of(m)
        t0 = time.time()
        m.signal(signal.SIGSTOP)
        self.recover("sigstop", m.name, t0, excluded)
        time.sleep(max(0.0, t0 + GROUP_TTL_S + 1 - time.time()))
        m.signal(signal.SIGCONT)
        self.wait(f"{m.name} to rejoin after SIGCONT",
                  lambda: any(s not in excluded for s in self.sessions_of(m)))
        # Paused to the database from the SIGSTOP until it registered a
        # fresh session (by the database clock, on this machine), having
        # cut off the calls of the lost one: a call cut off logged its last
        # line up to 0.1 s before it died, hence the slack (seed 7, long
        # slow profile: the call cut at .472, a new session at .473, the
        # item restarted at .546 on the member's other handler process, the
        # cut call's last line at .468).
        if m.handler_log:
            back = float(self.query(
                "SELECT extract(epoch FROM min(created_at)) FROM "
                f"sqlgroup.sessions WHERE instance = '{m.name}' AND "
                f"id::text <> ALL('{{{','.join(excluded)}}}'::text[])")[0][0])
            self.unresponsive.setdefault(m.handler_log, []).append(
                (t0, back + CUT_SLACK_S))

    def owns_parts(self, m):
        rows = self.query(
            "SELECT count(*) FROM sqlgroup.session_parts sp JOIN "
            "sqlgroup.sessions s ON s.id = sp.session_id WHERE "
            f"s.instance = '{m.name}'", check=False, timeout=3)
        return rows is not None and int(rows[0][0]) > 0

    def fault_join(self):
        """A member joins: parts move to it only after the calls their old
        owners started on them returned."""
        m = self.new_member(f"m{self.args.members + self.joined}")
        self.joined += 1
        t0 = time.time()
        self.members.append(m)
        self.recover("join", m.name, t0, [], until=lambda: self.owns_parts(m))

    def fault_leave(self):
        """A member leaves for good (SIGTERM: its calls in flight finish
        and are acknowledged, then its session is deleted)."""
        m = self.pick_member()
        excluded = self.sessions_of(m)
        t0 = time.time()
        if m.stop() != 0:
            raise RuntimeError(f"{m.name} did not stop cleanly on SIGTERM")
        self.members.remove(m)
        self.left.append(m)
        self.recover("leave", m.name, t0, excluded)

    def fault_stall(self):
        m = self.pick_member()
        excluded = self.sessions_of(m)
        t0 = time.time()
        for p in m.proxies:
            p.stall()
        self.recover("stall", m.name, t0, excluded)
        time.sleep(max(0.0, t0 + GROUP_TTL_S + 2 - time.time()))
        for p in m.proxies:
            p.resume()
        self.wait(f"{m.name} to rejoin after the stall",
                  lambda: any(s not in excluded for s in self.sessions_of(m)))

    def fault_commit_cut(self):
        """The producer's next three COMMITs reach the server, which
        commits them, and their connections are cut before the answer: each
        batch is in doubt for the producer, which must settle it without
        adding it twice (the checker's producer_mismatch)."""
        t0 = time.time()
        before = self.producer.commits_cut()
        self.producer.cut_at_commit(3)
        self.wait("three of the producer's COMMITs to be cut",
                  lambda: self.producer.commits_cut() >= before + 3,
                  timeout=60)
        self.producer.cut_at_commit(0)
        self.recover("commit_cut", "producer", t0, [])

    def fault_pg_restart(self):
        t0 = time.time()
        self.primary.restart_immediate()
        self.recover("pg_restart", self.primary.name, t0, [],
                     db_back_s=time.time() - t0)

    def fault_pooler_restart(self):
        """PgBouncer stops (every client and server connection cut, the
        members' work in flight with it) and starts again on its port."""
        t0 = time.time()
        self.bouncer.restart(down_for=0.5)
        self.recover("pooler_restart", "pgbouncer", t0, [],
                     db_back_s=time.time() - t0)

    def fault_terminate(self):
        rows = self.query("SELECT pid FROM pg_stat_activity WHERE datname = "
                          "'chaos' AND application_name LIKE 'sqlgroup%' "
                          "ORDER BY pid")
        pids = [r[0] for r in rows]
        victims = self.rng.sample(pids, max(1, len(pids) // 2))
        t0 = time.time()
        self.query("SELECT count(pg_terminate_backend(pid)) FROM "
                   f"unnest('{{{','.join(victims)}}}'::int[]) AS pid")
        self.recover("terminate", f"{len(victims)} of {len(pids)} backends",
                     t0, [])

    def fault_rolling(self):
        if self.args.static_timeout:
            self.settle()
        for m in self.members:
            excluded = self.sessions_of(m)
            t0 = time.time()
            if m.stop() != 0:
                raise RuntimeError(f"{m.name} did not stop cleanly on SIGTERM")
            m.start()
            self.recover("rolling", m.name, t0, excluded,
                         member=m if self.args.static_timeout else None)

    def fault_kill9_return(self):
        """A static member killed and restarted at once: the new process
        takes the place of the killed one's session before its TTL."""
        self.settle()
        m = self.pick_member()
        excluded = self.sessions_of(m)
        t0 = time.time()
        m.kill()
        m.start()
        self.recover("kill9_return", m.name, t0, excluded, member=m)
        # A crash keeps no place: only a process that registers before the
        # killed session expires (a TTL after its last heartbeat, at most
        # one interval before the kill) takes it over. On a loaded machine
        # the start can take longer; then the others rightly took the parts.
        late = self.query(
            "SELECT count(*) FROM sqlgroup.sessions WHERE instance = "
            f"'{m.name}' AND created_at > to_timestamp({t0}) + "
            f"interval '{GROUP_TTL_S - HEARTBEAT_S} seconds'")
        if int(late[0][0]) > 0:
            fault = self.faults[-1]
            fault["late_restart_takes"] = fault.pop("bystander_takes")
            log(f"seed {self.seed}: {m.name} registered again more than "
                f"{GROUP_TTL_S - HEARTBEAT_S:g} s after the kill; its "
                "parts expired and moved, as for any crash")

    def fault_zombie(self):
        """Two processes under one static name: the newer takes the place
        at once; the older, resumed, must stop (not register again) with an
        error naming the instance, and the fence refuses its acks."""
        self.settle()
        old = self.pick_member()
        excluded = self.sessions_of(old)
        old.signal(signal.SIGSTOP)
        self.twins += 1
        new = old.twin(self.log_dir, f"{old.name}-twin{self.twins}")
        t0 = time.time()
        new.start()
        self.recover("zombie", old.name, t0, excluded, member=old)
        old.signal(signal.SIGCONT)
        try:
            code = old.proc.wait(timeout=RECOVERY_LIMIT_S)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"the replaced process of {old.name} still "
                               "runs after SIGCONT: a zombie was not fenced")
        with open(old.log_path, errors="replace") as f:
            said = f.read()
        if code == 0 or f"'{old.name}'" not in said:
            raise RuntimeError(f"the replaced process of {old.name} exited "
                               f"{code} without an error naming the instance")
        self.members[self.members.index(old)] = new
        old.close()

    def fault_resize(self):
        """Changes the part count under load (group alter --parts), through
        RESIZE_FACTORS, each change recovered before the next; a member is
        killed and restarted at once during the middle one."""
        for i, factor in enumerate(RESIZE_FACTORS):
            old = self.parts
            new = max(1, min(4096, round(old * factor)))
            t0 = time.time()
            self.run_cli("group", "alter", "chaos", "--parts", str(new),
                         "--dsn", self.node_dsn())
            self.parts = new
            if i == 1:
                m = self.pick_member()
                self.kill(m)
                m.start()
            self.recover("resize", f"{old}->{new}", t0, [])

    def fault_pause(self):
        """The whole group paused for 2 s under load, then resumed."""
        self.operate("group", "pause", "chaos")
        paused = self.db_time("SELECT paused_at FROM sqlgroup.pauses "
                              "WHERE group_name = 'chaos' AND block = ''")
        time.sleep(2.0)
        resumed = self.db_time()
        self.operate("group", "resume", "chaos")
        t0 = time.time()
        self.count_delivered_while_paused(paused, resumed)
        self.recover("pause", "group", t0, [])

    def fault_operate(self):
        """One of the keys with the most waiting items paused; after 1.5 s
        (in-flight items finished) its waiting items cancelled into the
        dead letters, those requeued by id at their original places, and
        the key resumed: they go first, in order, then what came since."""
        rows = self.query("SELECT key FROM sqlgroup.items WHERE group_name = "
                          "'chaos' AND key IS NOT NULL GROUP BY key "
                          "ORDER BY count(*) DESC, key LIMIT 5")
        key = self.rng.choice([r[0] for r in rows]) if rows else "1"
        self.operate("group", "pause", "chaos", "--key", key)
        paused = self.db_time("SELECT paused_at FROM sqlgroup.pauses "
                              "WHERE group_name = 'chaos' AND key = "
                              f"'{key}'")
        time.sleep(1.5)
        r = subprocess.run([self.args.cli, "items", "cancel", "chaos", "--key",
                            key, "--json", "--dsn",
                            self.node_dsn("chaos_operator")],
                           capture_output=True, text=True, timeout=60)
        ids = [c["id"] for c in json.loads(r.stdout)] if r.returncode == 0 \
            else []
        if r.returncode != 0 and "no waiting item of key" not in r.stderr:
            raise RuntimeError(f"items cancel failed: {r.stderr}")
        self.cancelled += len(ids)
        if ids:
            self.operate("dead", "requeue", "chaos", *ids)
            self.requeued += len(ids)
        resumed = self.db_time()
        self.operate("group", "resume", "chaos", "--key", key)
        t0 = time.time()
        self.count_delivered_while_paused(paused, resumed, key)
        self.recover("operate", f"key {key}: {len(ids)} cancelled and "
                     "requeued", t0, [])

    def fault_failover(self):
        old = self.primary
        new = self.nodes[1] if old is self.nodes[0] else self.nodes[0]
        t0 = time.time()
        old.kill()
        new.promote()
        self.primary = new
        self.recover("failover", f"{old.name}->{new.name}", t0, [],
                     db_back_s=time.time() - t0)
        # A new standby where the old primary was, so the next failover has
        # somewhere to go.
        slot = self.nodes.index(old)
        old.remove()
        fresh = PgNode.standby_of(new, self.root,
                                  f"pg-{len(self.faults)}")
        self.nodes[slot] = fresh
        # Everyone who reaches the database through a proxy of this slot,
        # the producer too: left on the removed server, its next failover
        # would leave it no server to reach (seed 1127, long profile).
        for client in self.members + self.calm + [self.producer]:
            client.retarget(slot, fresh.port)
        new.wait_streaming(fresh)
        new.require_sync_standby(True)

    # --- the run ---------------------------------------------------------
    def schedule(self):
        kinds = list(self.kinds)
        self.rng.shuffle(kinds)
        if self.args.schedule:  # the first faults, as asked
            kinds = self.args.schedule.split(",")
        for kind in kinds:
            yield kind
        if self.args.profile == "long":
            end = time.time() + self.args.minutes * 60
            while time.time() < end:
                yield self.rng.choice(self.kinds)

    def run(self):
        log(f"seed {self.seed}: setting up in {self.root}")
        self.setup()
        for kind in self.schedule():
            time.sleep(self.rng.uniform(1.0, 3.0))
            dead = [m.name for m in self.members if not m.alive()]
            if dead:  # only the suite may take a member down
                raise RuntimeError(f"member(s) {dead} exited on their own")
            # The fleet stays between 2 and --members + 2.
            if kind == "join" and len(self.members) >= self.args.members + 2:
                kind = "leave"
            elif kind == "leave" and len(self.members) <= 2:
                kind = "join"
            self.injected[kind] = self.injected.get(kind, 0) + 1
            log(f"seed {self.seed}: {kind}")
            getattr(self, f"fault_{kind}")()
        log(f"seed {self.seed}: draining")
        self.producer.stop()
        try:
            self.wait("the queue to drain", lambda: self.query(
                "SELECT count(*) FROM sqlgroup.items", check=False) == [["0"]],
                timeout=120)
        except RuntimeError as e:
            log(f"seed {self.seed}: {e}; the checker counts what is left")
        # Checked while the members still own their parts, so the open
        # entries of the ownership log have takes to match.
        found = checker.check(self.query, skip=checker.RESULT_CHECKS
                              if self.logged or self.sql_calls else ())
        found["overlapping_samples"] = self.overlapping_samples
        if self.args.topic:
            calm = checker.check(self.query, group="calm")
        codes = {m.name: m.stop() for m in self.members + self.calm}
        if self.logged or self.sql_calls:
            return self.logged_summary(found, codes)
        if self.args.static_timeout:
            # Stopped static members keep their places and parts: scaling
            # down is `group leave`, which closes their takes.
            for m in self.members:
                self.run_cli("group", "leave", "chaos", "--instance", m.name,
                             "--dsn", self.node_dsn())
        found.update(checker.check_after_leave(self.query))
        if self.args.topic:
            calm.update(checker.check_after_leave(self.query, group="calm"))
            found.update({f"calm_{k}": v for k, v in calm.items()})
        found["unclean_exits"] = sum(c != 0 for c in codes.values())
        # Producers ride out every fault (--retry_for): one that exits
        # non-zero gave up on a batch.
        found["producer_failures"] = self.producer.failures
        # What the producers were asked for against what went in (the
        # tally commits with each batch): a batch added twice or lost.
        tallied = int(self.query(
            "SELECT coalesce(sum(n), 0) FROM sqlgroup_demo.produced")[0][0])
        found["producer_mismatch"] = abs(tallied - self.producer.asked) \
            if not self.producer.cut_short else 0
        processed = int(self.query(
            "SELECT count(*) FROM sqlgroup_demo.results")[0][0])
        dead = int(self.query(
            "SELECT count(*) FROM sqlgroup.dead_items")[0][0])
        # What key_order had to go on: results whose payload carries the
        # item's number within its key.
        numbered = int(self.query(
            "SELECT count(*) FROM sqlgroup_demo.results "
            "WHERE encode(payload, 'escape') ~ '^[0-9]'")[0][0])
        if self.args.static_timeout:
            found["bystander_takes"] = sum(f.get("bystander_takes", 0)
                                           for f in self.faults)
        found["delivered_while_paused"] = self.delivered_while_paused
        summary = {"seed": self.seed, "processed": processed, "dead": dead,
                   "numbered": numbered, "cancelled": self.cancelled,
                   "requeued": self.requeued,
                   "overlap_samples": self.overlap_samples,
                   "handler_failures": self.handler_failures(),
                   "producer_runs": self.producer.runs,
                   "producer_asked": self.producer.asked,
                   "producer_cut_short": self.producer.cut_short,
                   "member_exit_codes": codes, **found}
        print(json.dumps({"chaos_run": summary}), flush=True)
        return summary

    def logged_summary(self, found, codes):
        """The slow, fast and sql profiles' result: the database checks that
        need no results rows, and invariant 10 from the handlers' logs;
        for the fast profile also acked_unhandled, from the producer's
        tally and those logs; for the sql profile exactly once, from the
        tally and the function's notes (checker.sql_call_checks)."""
        found.update(checker.check_after_leave(self.query))
        found["unclean_exits"] = sum(c != 0 for c in codes.values())
        if self.sql_calls:
            found.update(checker.sql_call_checks(self.query, FAST_TALLY,
                                                 SQL_NOTED))
        logs = [p for m in self.members + self.left for p in m.handler_logs]
        runs = checker.read_deliveries(logs)
        bad, excused, examples = checker.handler_overlaps(
            runs, self.unresponsive)
        for item, a, b in examples:
            log(f"seed {self.seed}: item {item} ran in two live members at "
                f"once: {a} and {b}")
        if self.logged:  # (the sql profile's handler keeps no log)
            found["handler_overlaps"] = bad
        if self.logged and self.fast:
            found["acked_unhandled"] = checker.acked_unhandled(
                self.query, runs, FAST_TALLY)
        deliveries = [d for ds in runs.values() for d in ds]
        summary = {
            "seed": self.seed, "handler": self.args.handler,
            "enqueued": self.producer.enqueued,
            "enqueue_failures": self.producer.failures,
            "dead": int(self.query(
                "SELECT count(*) FROM sqlgroup.dead_items")[0][0])}
        if self.sql_calls:
            summary["noted"] = int(self.query(
                f"SELECT count(*) FROM {SQL_NOTED}")[0][0])
        else:
            summary.update({
                "items_delivered": len(runs),
                "deliveries": len(deliveries),
                "deliveries_cut": sum(d["cut"] for d in deliveries),
                "redelivered_items": sum(len(ds) > 1 for ds in runs.values()),
                "handler_overlaps_excused": excused})
        summary.update({
            "faults": self.injected,
            "overlap_samples": self.overlap_samples,
            "member_exit_codes": codes, **found})
        print(json.dumps({"chaos_run": summary}), flush=True)
        return summary

    def handler_failures(self):
        """Deliveries that failed (--fail_rate), as the members' graceful
        stops reported them (a killed member reports nothing)."""
        total = 0
        for m in self.members:
            with open(m.log_path, errors="replace") as f:
                total += sum(int(n) for n in re.findall(
                    r"stopped: .* failed=(\d+)", f.read()))
        return total

    def close(self, keep):
        for m in self.members + self.left + self.calm:
            m.close()
        if self.producer:
            self.producer.stop()
            for p in getattr(self.producer, "proxies", []):
                p.close()
        if self.bouncer:
            self.bouncer.close()
        for n in self.nodes:
            n.kill()
        if keep:
            log(f"logs kept in {self.root}")
        else:
            shutil.rmtree(self.root, ignore_errors=True)


def report(faults, runs):
    print("\n| fault | injected | database back (s) p50 / max | "
          "all parts owned again (s) p50 / max | "
          "every part processing again (s) p50 / max | "
          "takes by bystanders |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for kind in KINDS + STATIC_KINDS + ["pooler_restart", "join",
                                        "leave"]:
        mine = [f for f in faults if f["kind"] == kind]
        if not mine:
            continue
        owned = [f["owned_s"] for f in mine if f["owned_s"] is not None]
        resumed = [f["resumed_s"] for f in mine if f["resumed_s"] is not None]
        back = [f["db_back_s"] for f in mine if f["db_back_s"] is not None]
        fmt = (lambda xs: f"{statistics.median(xs):.2f} / {max(xs):.2f}"
               if xs else "-")
        takes = [f["bystander_takes"] for f in mine
                 if "bystander_takes" in f]
        print(f"| {kind} | {len(mine)} | {fmt(back)} | {fmt(owned)} | "
              f"{fmt(resumed)} | {sum(takes) if takes else '-'} |")
    late = [f for f in faults if "late_restart_takes" in f]
    if late:
        print(f"\n{len(late)} kill9_return restart(s) registered after the "
              "killed session could expire: their parts moved as for any "
              f"crash ({sum(f['late_restart_takes'] for f in late)} takes, "
              "not counted above).")
    print(f"\nTTL {GROUP_TTL_S:g} s, heartbeat {HEARTBEAT_S:g} s. Per seed:")
    for r in runs:
        print("  " + ", ".join(f"{k} {v}" for k, v in r.items()
                               if k != "member_exit_codes"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", required=True, help="path of the sqlgroup binary")
    ap.add_argument("--profile", choices=["short", "long"], default="short")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--seeds", default=None, help="comma-separated seeds")
    ap.add_argument("--minutes", type=float, default=10.0,
                    help="long profile: minutes of random faults per seed")
    ap.add_argument("--members", type=int, default=4)
    ap.add_argument("--parts", type=int, default=16)
    ap.add_argument("--rate", type=int, default=200,
                    help="items/s produced throughout")
    ap.add_argument("--fail_rate", type=float, default=0.05,
                    help="share of deliveries the members' handler fails "
                    "(consume --fail_rate)")
    ap.add_argument("--static_timeout", default=None,
                    help="run static members (consume --static_timeout), "
                    "e.g. 10s, and add the kill9_return and zombie faults")
    ap.add_argument("--pooler", choices=["none", "transaction"],
                    default="none",
                    help="members through a PgBouncer in transaction mode "
                    "(and a pooler_restart fault instead of failover)")
    ap.add_argument("--handler", choices=["record", "slow", "fast", "sql"],
                    default="record",
                    help="slow: members run tests/support/slow_handler.py "
                    "(exec, 0.5-10 s per item) through joins, leaves, "
                    "rolling restarts, kill -9, SIGSTOP and resizes, and "
                    "handler_overlaps checks invariant 10 from its logs; "
                    "fast: the same handler on items of no work, mostly "
                    "unkeyed, whose acks gather, through those faults and "
                    "the database's, and acked_unhandled checks that no "
                    "item was acknowledged before its handler returned; "
                    "sql: the fast profile's items and faults through a "
                    "SQL function whose calls each worker groups into one "
                    "transaction, checked exactly once from the notes it "
                    "writes")
    ap.add_argument("--schedule", default=None,
                    help="comma-separated faults to inject first, in this "
                    "order, instead of each kind once in a seeded order "
                    "(e.g. failover,failover); the long profile then adds "
                    "random ones")
    ap.add_argument("--topic", action="store_true",
                    help="publish to a topic read by the group under the "
                    "faults and by a second group, calm, and check each")
    ap.add_argument("--keep", action="store_true", help="keep logs and data")
    args = ap.parse_args()
    unknown = set((args.schedule or "").split(",")) - {""} - set(
        KINDS + STATIC_KINDS + SLOW_KINDS + FAST_KINDS + ["pooler_restart"])
    if unknown:
        ap.error(f"--schedule: unknown fault(s) {sorted(unknown)}")
    if args.handler != "record" and (args.static_timeout or
                                     args.pooler != "none"):
        ap.error(f"--handler {args.handler} runs dynamic members straight "
                 "to the database: no --static_timeout, no --pooler")
    seeds = ([int(s) for s in args.seeds.split(",")] if args.seeds else
             [args.seed if args.seed is not None else 1])
    faults, runs, failed = [], [], []
    for seed in seeds:
        run = ChaosRun(args, seed)
        ok = False
        try:
            summary = run.run()
            runs.append(summary)
            broken = [k for k in summary
                      if k.removeprefix("calm_") in
                      checker.NAMES + ["bystander_takes",
                                       "overlapping_samples"]
                      and summary[k] != 0]
            for k in broken:
                meaning = {
                    "bystander_takes": "parts taken by members that were not "
                    "restarted during static members' restarts",
                    "overlapping_samples": "samples of the current owners "
                    "that showed two overlapping key ranges"}.get(
                        k) or checker.meaning(k.removeprefix("calm_"))
                log(f"INVARIANT BROKEN (seed {seed}): {k} = {summary[k]}: "
                    f"{meaning}")
            ok = not broken
        except Exception as e:  # a failed run keeps its logs for a look
            log(f"seed {seed} FAILED: {e}")
        finally:
            faults += run.faults
            run.close(keep=args.keep or not ok)
        if not ok:
            failed.append(seed)
    report(faults, runs)
    if failed:
        log(f"FAILED seeds: {failed}")
        return 1
    log("all invariants held")
    return 0


if __name__ == "__main__":
    sys.exit(main())
