#!/usr/bin/env python3
"""Part-count change benchmark (issue 21): a live group of `--members`
`sqlgroup consume` processes (record handler, 2 workers each) under a keyed
load changes its part count 16 -> 64 and back to 16, on one private,
default-durability PostgreSQL. Per change:
  settled_ms      from `group alter --parts` until every part of the new
                  count is owned by its lexical target (owners read from
                  session_parts every 10 ms)
  key_gap_ms      the longest time between two consecutive acknowledgements
                  of any one key from the change until a second after it
                  settled: the longest pause of any key
  key_gap_base_ms the same over the 5 seconds before the change (the gap a
                  key has anyway at this rate, for comparison)
  before / during / after   items acknowledged per second over the 5 s
                  before, from the change until settled, and the 5 s after
Prints one JSON line per change and repetition, then a table of medians.

Usage: bench/resize_bench.py --cli build/sqlgroup [--reps 3] [--rate 1500]
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import tempfile
import time

from private_pg import private_postgres

ARGS = None
GROUP = "resize"


def sh(*args):
    return subprocess.run(args, check=True, capture_output=True,
                          text=True).stdout


class Fleet:
    def __init__(self, dsn, workdir):
        self.dsn, self.workdir, self.members = dsn, workdir, []
        self.producer = None

    def sql(self, query):
        return sh("psql", self.dsn, "-Atc", query).strip()

    def cli(self, *args):
        return sh(ARGS.cli, *args, "--dsn", self.dsn)

    def db_now(self):
        return float(self.sql("SELECT extract(epoch FROM clock_timestamp())"))

    def start(self):
        for i in range(ARGS.members):
            name = "m%d" % i
            log = open(os.path.join(self.workdir, name + ".log"), "w")
            self.members.append(subprocess.Popen(
                [ARGS.cli, "consume", "--dsn", self.dsn, "--group", GROUP,
                 "--handler", "record", "--workers", "2", "--instance", name,
                 "--metrics_addr", "", "--log_level", "warn"],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL))
            log.close()

    def produce(self, seconds):
        log = open(os.path.join(self.workdir, "producer.log"), "a")
        self.producer = subprocess.Popen(
            [ARGS.cli, "produce", "--dsn", self.dsn, "--group", GROUP,
             "--count", str(int(ARGS.rate * seconds)), "--keys",
             str(ARGS.keys), "--rate", str(ARGS.rate)],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()

    def stop(self):
        for p in self.members + [self.producer]:
            if p and p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.members + [self.producer]:
            if p:
                p.wait(timeout=60)

    def settled(self, parts):
        """Every part of `parts` owned by its lexical target over the live
        members, and nothing of another part count still owned."""
        row = self.sql(
            "SELECT (SELECT string_agg(s.id::text, ',' ORDER BY s.id) "
            "  FROM sqlgroup.sessions s JOIN sqlgroup.groups g "
            "  ON g.name = s.group_name WHERE s.group_name = '%s' "
            "  AND s.heartbeated_at > clock_timestamp() - g.session_ttl), "
            "(SELECT string_agg(part || '=' || session_id, ',') "
            "  FROM sqlgroup.session_parts WHERE group_name = '%s' "
            "  AND parts_of = %d), "
            "(SELECT count(*) FROM sqlgroup.session_parts "
            "  WHERE group_name = '%s' AND parts_of <> %d)"
            % (GROUP, GROUP, parts, GROUP, parts))
        live, owned, old = row.split("|")
        ids = live.split(",") if live else []
        owners = dict(o.split("=") for o in owned.split(",")) if owned else {}
        if int(old) or len(owners) != parts or not ids:
            return False
        n = len(ids)
        return all(owners.get(str(p)) == ids[i] for i in range(n)
                   for p in range(i * parts // n, (i + 1) * parts // n))

    def wait_settled(self, parts, timeout=120):
        deadline = time.monotonic() + timeout
        while not self.settled(parts):
            if time.monotonic() > deadline:
                raise RuntimeError("never settled on %d parts" % parts)
            time.sleep(0.01)
        return self.db_now()

    def acked_per_s(self, t0, t1):
        n = int(self.sql(
            "SELECT count(*) FROM sqlgroup_demo.results WHERE acked_at "
            ">= to_timestamp(%f) AND acked_at < to_timestamp(%f)" % (t0, t1)))
        return n / max(t1 - t0, 1e-3)

    def longest_key_gap_ms(self, t0, t1):
        """The longest wait between consecutive acks of one key, over acks
        in [t0, t1] (each key's first ack there measured from its last one
        before t0)."""
        v = self.sql(
            "WITH r AS (SELECT key, acked_at, lag(acked_at) OVER "
            "(PARTITION BY key ORDER BY acked_at) AS prev "
            "FROM sqlgroup_demo.results WHERE key IS NOT NULL "
            "AND acked_at BETWEEN to_timestamp(%f) - interval '10 seconds' "
            "AND to_timestamp(%f)) "
            "SELECT coalesce(max(extract(epoch FROM acked_at - prev)), 0) "
            "* 1000 FROM r WHERE acked_at >= to_timestamp(%f)" % (t0, t1, t0))
        return float(v)


def change(fleet, rep, old, new):
    t0 = fleet.db_now()
    fleet.cli("group", "alter", GROUP, "--parts", str(new))
    settled = fleet.wait_settled(new)
    time.sleep(6)  # the 5 s after, and acks still in flight
    r = {"bench": "resize", "rep": rep, "from": old, "to": new,
         "members": ARGS.members, "rate": ARGS.rate, "keys": ARGS.keys,
         "settled_ms": (settled - t0) * 1000,
         "key_gap_ms": fleet.longest_key_gap_ms(t0, settled + 1),
         "key_gap_base_ms": fleet.longest_key_gap_ms(t0 - 5, t0),
         "before": fleet.acked_per_s(t0 - 5, t0),
         "during": fleet.acked_per_s(t0, max(settled, t0 + 0.2)),
         "after": fleet.acked_per_s(settled, settled + 5)}
    print(json.dumps(r), flush=True)
    return r


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cli", required=True)
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--rate", type=int, default=1500,
                        help="items/s produced throughout")
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--reps", type=int, default=3)
    ARGS = parser.parse_args()
    ARGS.cli = os.path.abspath(ARGS.cli)
    workdir = tempfile.mkdtemp(prefix="sqlgroup-bench-resize-")
    with private_postgres(ARGS.cli) as dsn:
        fleet = None
        try:
            fleet = Fleet(dsn, workdir)
            fleet.cli("group", "create", GROUP, "--parts", "16")
            fleet.start()
            fleet.wait_settled(16)
            fleet.produce(ARGS.reps * 30 + 20)
            time.sleep(8)
            results = []
            for rep in range(ARGS.reps):
                results.append(change(fleet, rep, 16, 64))
                results.append(change(fleet, rep, 64, 16))
            print("\n| change | reps | settled p50 ms | settled max ms | longest "
                  "key pause p50 ms | max ms | a key's gap before, p50 ms | "
                  "items/s before | during | after |")
            print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
                  "| ---: |")
            for old, new in ((16, 64), (64, 16)):
                rs = [r for r in results if r["from"] == old]
                med = lambda k: statistics.median(r[k] for r in rs)
                print("| %d -> %d | %d | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f "
                      "| %.0f | %.0f |" % (
                          old, new, len(rs), med("settled_ms"),
                          max(r["settled_ms"] for r in rs), med("key_gap_ms"),
                          max(r["key_gap_ms"] for r in rs),
                          med("key_gap_base_ms"), med("before"), med("during"),
                          med("after")))
            print("\n%d members (record handler, 2 workers each), %d items/s over "
                  "%d keys." % (ARGS.members, ARGS.rate, ARGS.keys))
        finally:
            if fleet:
                fleet.stop()


if __name__ == "__main__":
    main()
