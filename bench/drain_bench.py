#!/usr/bin/env python3
"""Commit-bound throughput against graphile-worker (issue 43): the same
backlog of --items no-op items drained by each system in turn, on one
private durable PostgreSQL, measured the same way for all: the queue's
table is polled every 10 ms (one psql session), and the rate is the items
left at the first poll that saw one gone over the time from that poll to
the one that saw none left.

Systems (--systems, the order rotated every repetition):
  sqlgroup_fleet   --processes `sqlgroup consume` processes with default
                   settings (2 workers each), handler noop
  sqlgroup_one     one `sqlgroup consume --workers --concurrency`
  graphile         graphile-worker, concurrency --concurrency, its defaults
  graphile_local   the same with its batched mode: localQueue of
                   --local_queue jobs and completeJobBatchDelay
                   --complete_delay ms
With --before CLI (a build that speaks the same schema), the systems
sqlgroup_fleet_before and sqlgroup_one_before run that build's CLI the
same way, for a same-run comparison of two builds.
Items are unkeyed, with 16-byte payloads, in a group of 16 parts (sqlgroup)
or as one task's jobs (graphile). graphile-worker is installed by
bench/peers/graphile_bench.py's npm step into its cache.

Prints one JSON line per drain, then a table of medians and each system's
ratio to graphile_local (medians of the per-repetition ratios).

Usage: bench/drain_bench.py --cli build/sqlgroup [--reps 3] [--items 20000]
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "peers"))
from graphile_bench import SPEC, install, start_worker, url_of  # noqa: E402
from members_bench import Psql  # noqa: E402
from private_pg import private_postgres  # noqa: E402

SYSTEMS = ["sqlgroup_fleet", "sqlgroup_one", "graphile", "graphile_local",
           "sqlgroup_fleet_before", "sqlgroup_one_before"]


def sh(*args):
    return subprocess.run(args, check=True, capture_output=True,
                          text=True).stdout


def drain(sql, left_sql, items, procs, what):
    """Polls `left_sql` until 0: the items left at the first poll that saw
    one gone, and the seconds from that poll to the last."""
    deadline = time.monotonic() + 600
    first = first_left = None
    while True:
        left = int(sql(left_sql))
        now = time.monotonic()
        if first is None and left < items:
            first, first_left = now, left
        if left == 0:
            return first_left, now - first
        if now > deadline or any(p.poll() is not None for p in procs):
            raise RuntimeError("%s did not drain (%d left)" % (what, left))
        time.sleep(0.01)


def stop_all(procs):
    """SIGTERM to every process, then waits up to 60 s for each."""
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()


def drain_one(args, cli, modules, dsn, sql, system, rep, log):
    """Enqueues --items for `system`, starts it and times its drain."""
    procs = []
    if system.startswith("sqlgroup"):
        group = "d-%s-%d" % (system, rep)
        sh(cli, "group", "create", group, "--parts", "16", "--dsn", dsn)
        sh(cli, "produce", "--generate", "--group", group, "--count",
           str(args.items), "--dsn", dsn)
        fleet = system.startswith("sqlgroup_fleet")
        run = os.path.abspath(args.before) if system.endswith("_before") else cli
        flags = ([] if fleet else
                 ["--workers", str(args.concurrency), "--max_connections",
                  str(args.concurrency + 1)])
        for _ in range(args.processes if fleet else 1):
            procs.append(subprocess.Popen(
                [run, "consume", "--dsn", dsn, "--group", group, "--handler",
                 "noop", "--metrics_addr", "", "--log_level", "warn"] + flags,
                stdout=log, stderr=log, stdin=subprocess.DEVNULL))
        left = ("SELECT count(*) FROM sqlgroup.items WHERE group_name = '%s'"
                % group)
    else:
        sql("SELECT graphile_worker.add_jobs(array_agg(%s)) "
            "FROM generate_series(1, %d)" % (SPEC, args.items))
        batched = ["--local_queue", str(args.local_queue), "--complete_delay",
                   str(args.complete_delay)]
        procs.append(start_worker(
            modules, url_of(dsn), os.devnull, args, items=1000000000,
            extra=batched if system == "graphile_local" else (), stdout=log,
            stderr=log))
        left = "SELECT count(*) FROM graphile_worker.jobs"
    try:
        items, seconds = drain(sql, left, args.items, procs, system)
    finally:
        stop_all(procs)
    return {"bench": "drain", "rep": rep, "system": system, "items": items,
            "seconds": round(seconds, 3),
            "items_per_s": round(items / seconds)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--items", type=int, default=20000)
    ap.add_argument("--systems", default=",".join(SYSTEMS[:4]))
    ap.add_argument("--before", help="another build's sqlgroup CLI")
    ap.add_argument("--processes", type=int, default=8)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--local_queue", type=int, default=64)
    ap.add_argument("--complete_delay", type=int, default=0)
    ap.add_argument("--cache", default=os.path.expanduser(
        "~/.cache/sqlgroup-bench-peers/graphile"))
    args = ap.parse_args()
    systems = args.systems.split(",")
    if not set(systems) <= set(SYSTEMS):
        ap.error("--systems: any of %s" % ",".join(SYSTEMS))
    if any(s.endswith("_before") for s in systems) and not args.before:
        ap.error("the *_before systems need --before CLI")
    cli = os.path.abspath(args.cli)
    modules = install(args.cache) if any(
        s.startswith("graphile") for s in systems) else None
    workdir = tempfile.mkdtemp(prefix="sqlgroup-bench-drain-")
    results = []
    with private_postgres(cli) as dsn:
        sql = Psql(dsn).sql
        if modules:
            sh(os.path.join(modules, ".bin", "graphile-worker"),
               "--schema-only", "-c", url_of(dsn))
        for rep in range(args.reps):
            order = systems[rep % len(systems):] + systems[:rep % len(systems)]
            for system in order:
                path = os.path.join(workdir, "%s-%d.log" % (system, rep))
                with open(path, "w") as log:
                    r = drain_one(args, cli, modules, dsn, sql, system, rep,
                                  log)
                print(json.dumps(r), flush=True)
                results.append(r)
    by = {s: [r for r in results if r["system"] == s] for s in systems}
    med = {s: statistics.median(r["items_per_s"] for r in by[s])
           for s in systems}
    base = "graphile_local" if "graphile_local" in systems else None
    print("\n| system | items/s, median of %d | ratio to graphile_local |"
          % args.reps)
    print("| --- | ---: | ---: |")
    for s in systems:
        ratio = "-"
        if base:
            ratio = "%.2f" % statistics.median(
                a["items_per_s"] / b["items_per_s"]
                for a, b in zip(by[s], by[base]))
        print("| %s | %d | %s |" % (s, med[s], ratio))
    print("\n%d no-op items per drain; sqlgroup_fleet: %d processes of 2 "
          "workers; sqlgroup_one and graphile: concurrency %d; "
          "graphile_local: localQueue %d, completeJobBatchDelay %d ms."
          % (args.items, args.processes, args.concurrency, args.local_queue,
             args.complete_delay))


if __name__ == "__main__":
    main()
