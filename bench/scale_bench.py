#!/usr/bin/env python3
"""Scale benchmark (issue 7): what members cost as parts and members grow.

For P parts and M members (`sqlgroup consume` processes on one private,
default-durability PostgreSQL), after the group settles with M-1 members:
  join_s           one more member joins: seconds until every part is owned
                   by its lexical target (owners read from session_parts)
  conns_per_member database connections per member (pg_stat_activity)
  rss_mb_max       peak RSS of the largest member (VmHWM)
  idle_tps_per_member  transactions per second per idle member (pg_stat_database)
  enqueue_to_claim_ms  p50 over 20 single items enqueued into an idle group:
                   enqueue to dead-letter, with a handler that always fails
                   and max_attempts 1 (so it is measured by the database
                   clock alone: claim + one failing handler call)
Prints a table and one JSON line per result.

Usage: bench/scale_bench.py --cli build/sqlgroup [--parts 4096] [--members 1,4,16]
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import tempfile
import time

ARGS = None


def sh(*args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True,
                          **kw).stdout


class Bench:
    def __init__(self, dsn, workdir):
        self.dsn, self.workdir, self.members = dsn, workdir, []

    def sql(self, query):
        return sh("psql", self.dsn, "-Atc", query).strip()

    def cli(self, *args):
        return sh(ARGS.cli, *args, "--dsn", self.dsn)

    def start_member(self, group, name, handler="noop", extra=()):
        log = open(os.path.join(self.workdir, name + ".log"), "w")
        p = subprocess.Popen([ARGS.cli, "consume", "--dsn", self.dsn, "--group",
                              group, "--handler", handler, "--workers", "2",
                              "--instance", name, "--metrics_addr", "",
                              "--log_level", "warn", *extra],
                             stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        self.members.append(p)
        return p

    def stop_members(self):
        for p in self.members:
            p.send_signal(signal.SIGTERM)
        for p in self.members:
            p.wait(timeout=60)
        self.members = []

    def settled(self, group, parts, members):
        """Owners match the lexical target over exactly `members` live."""
        live = self.sql(
            "SELECT string_agg(s.id::text, ',' ORDER BY s.id) FROM "
            "sqlgroup.sessions s JOIN sqlgroup.groups g ON g.name = "
            "s.group_name WHERE s.group_name = '%s' AND s.heartbeated_at > "
            "clock_timestamp() - g.session_ttl" % group)
        ids = live.split(",") if live else []
        if len(ids) != members:
            return False
        owners = self.sql(
            "SELECT string_agg(session_id::text, ',' ORDER BY part) FROM "
            "sqlgroup.session_parts WHERE group_name = '%s'" % group)
        owners = owners.split(",") if owners else []
        if len(owners) != parts:
            return False
        n = len(ids)
        return all(owners[p] == ids[next(i for i in range(n) if
                                         i * parts // n <= p < (i + 1) * parts // n)]
                   for p in range(parts))

    def wait_settled(self, group, parts, members, timeout=120):
        deadline = time.monotonic() + timeout
        while not self.settled(group, parts, members):
            if time.monotonic() > deadline:
                raise RuntimeError("group %s never settled on %d members" %
                                   (group, members))
            time.sleep(0.02)

    def rss_mb(self):
        peak = 0
        for p in self.members:
            with open("/proc/%d/status" % p.pid) as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]) / 1024)
        return peak

    def xacts(self):
        return int(self.sql("SELECT xact_commit + xact_rollback FROM "
                            "pg_stat_database WHERE datname = "
                            "current_database()"))


def measure(b, parts, members):
    group = "p%dm%d" % (parts, members)
    b.cli("group", "create", group, "--parts", str(parts), "--ttl", "5s",
          "--heartbeat", "1s")
    for i in range(members - 1):
        b.start_member(group, "m%d" % i)
    if members > 1:
        b.wait_settled(group, parts, members - 1)
    start = time.monotonic()
    b.start_member(group, "m%d" % (members - 1))
    b.wait_settled(group, parts, members)
    join_s = time.monotonic() - start
    time.sleep(8)  # the first claim of every part, then idle
    conns = int(b.sql("SELECT count(*) FROM pg_stat_activity WHERE "
                      "application_name = 'sqlgroup-control' OR "
                      "application_name LIKE 'sqlgroup-worker-%'"))
    x0, t0 = b.xacts(), time.monotonic()
    time.sleep(10)
    idle_tps = (b.xacts() - x0) / (time.monotonic() - t0) / members
    rss = b.rss_mb()
    b.stop_members()
    # Enqueue-to-claim on an idle member, by the database clock.
    b.start_member(group, "lat", handler="fail:1", extra=("--max_attempts", "1"))
    b.wait_settled(group, parts, 1)
    time.sleep(2)
    for _ in range(20):
        b.cli("produce", "--group", group, "--count", "1")
        time.sleep(0.3)
    time.sleep(1)
    lat = [float(v) for v in b.sql(
        "SELECT extract(epoch from died_at - enqueued_at) * 1000 FROM "
        "sqlgroup.dead_items WHERE group_name = '%s'" % group).split()]
    b.stop_members()
    return {"bench": "scale", "parts": parts, "members": members,
            "join_s": round(join_s, 3),
            "conns_per_member": round(conns / members, 2),
            "rss_mb_max": round(rss, 1),
            "idle_tps_per_member": round(idle_tps, 1),
            "enqueue_to_claim_ms_p50": round(statistics.median(lat), 1)
            if lat else None,
            "enqueue_to_claim_ms_max": round(max(lat), 1) if lat else None}


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--cli", required=True)
    parser.add_argument("--parts", type=int, default=4096)
    parser.add_argument("--members", default="1,4,16")
    ARGS = parser.parse_args()
    ARGS.cli = os.path.abspath(ARGS.cli)
    workdir = tempfile.mkdtemp(prefix="sqlgroup-bench-")
    pg = subprocess.Popen([ARGS.cli, "postgres", "--durable"],
                          stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                          text=True)
    try:
        dsn = pg.stdout.readline()[len("dsn: "):].strip()
        b = Bench(dsn, workdir)
        b.cli("migrate")
        results = []
        for m in [int(x) for x in ARGS.members.split(",")]:
            r = measure(b, ARGS.parts, m)
            results.append(r)
            print(json.dumps(r), flush=True)
        print("\n%6s %7s %7s %10s %8s %14s %12s" % (
            "parts", "members", "join_s", "conns/memb", "rss_mb",
            "idle_tps/memb", "enq->claim"))
        for r in results:
            print("%6d %7d %7.3f %10.2f %8.1f %14.1f %9.1f ms" % (
                r["parts"], r["members"], r["join_s"], r["conns_per_member"],
                r["rss_mb_max"], r["idle_tps_per_member"],
                r["enqueue_to_claim_ms_p50"] or -1))
    finally:
        pg.send_signal(signal.SIGTERM)
        pg.wait(timeout=60)


if __name__ == "__main__":
    main()
