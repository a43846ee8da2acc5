#!/usr/bin/env python3
"""Claim and ack throughput under a role scoped to its group (issue 42),
against the superuser path, in the same run: on one private durable
PostgreSQL, the same backlog of --items no-op items enqueued and drained
by each path in turn (the order rotated every repetition):

  superuser   `sqlgroup produce` and `sqlgroup consume` as the superuser,
              which row-level security does not apply to
  every_group as roles granted without --group (policies of `true`)
  scoped      as roles granted --group of this group only, among --others
              other groups (policies comparing each row's group)

Enqueue: the seconds `sqlgroup produce --generate` takes for the backlog.
Drain: --processes `sqlgroup consume` processes (default settings, handler
noop); the rate is the items left at the first 10 ms poll that saw one
gone over the time from that poll to the one that saw none left. Prints
one JSON line per measure, then the medians and each path's ratio to
superuser (medians of the per-repetition ratios).

Usage: bench/roles_bench.py --cli build/sqlgroup [--reps 5] [--items 20000]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from drain_bench import drain, stop_all  # noqa: E402
from members_bench import Psql  # noqa: E402
from private_pg import private_postgres  # noqa: E402

PATHS = ["superuser", "every_group", "scoped"]


def sh(*args):
    return subprocess.run(args, check=True, capture_output=True,
                          text=True).stdout


def as_role(dsn, role):
    return " ".join(w for w in dsn.split() if not w.startswith("user=")) + \
        f" user={role}"


def run_path(args, dsn, psql, path, rep, log):
    group = f"r-{path}-{rep}".replace("_", "-")
    sh(args.cli, "group", "create", group, "--parts", "16", "--dsn", dsn)
    member, producer = dsn, dsn
    if path != "superuser":
        m_role, p_role = f"bench_m_{path}_{rep}", f"bench_p_{path}_{rep}"
        for role in (m_role, p_role):
            psql.sql(f"CREATE ROLE {role} LOGIN")
        grant = [args.cli, "grant", "--member_role", m_role, "--producer_role",
                 p_role, "--dsn", dsn]
        if path == "scoped":
            grant += ["--group", group]
        sh(*grant)
        member, producer = as_role(dsn, m_role), as_role(dsn, p_role)
    start = time.monotonic()
    sh(args.cli, "produce", "--generate", "--group", group, "--count",
       str(args.items), "--dsn", producer)
    enqueue_s = time.monotonic() - start
    procs = [subprocess.Popen(
        [args.cli, "consume", "--dsn", member, "--group", group, "--handler",
         "noop", "--metrics_addr", "", "--log_level", "warn"],
        stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        for _ in range(args.processes)]
    try:
        left = ("SELECT count(*) FROM sqlgroup.items WHERE group_name = "
                f"'{group}'")
        items, seconds = drain(psql.sql, left, args.items, procs, group)
    finally:
        stop_all(procs)
    return {"bench": "roles", "rep": rep, "path": path,
            "enqueue_items_per_s": round(args.items / enqueue_s),
            "drain_items": items, "drain_seconds": round(seconds, 3),
            "drain_items_per_s": round(items / seconds)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--items", type=int, default=20000)
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--others", type=int, default=20,
                    help="other groups, each with a scoped role of its own")
    args = ap.parse_args()
    args.cli = os.path.abspath(args.cli)
    results = []
    with private_postgres(args.cli) as dsn, \
            open(os.devnull, "w") as log:
        psql = Psql(dsn)
        # Other groups and their roles: the scoped path's policies sit
        # among others', as in a shared database.
        for i in range(args.others):
            sh(args.cli, "group", "create", f"other-{i}", "--parts", "4",
               "--dsn", dsn)
            psql.sql(f"CREATE ROLE other_{i} LOGIN")
            sh(args.cli, "grant", "--member_role", f"other_{i}", "--group",
               f"other-{i}", "--dsn", dsn)
        for rep in range(args.reps):
            order = PATHS[rep % 3:] + PATHS[:rep % 3]
            for path in order:
                r = run_path(args, dsn, psql, path, rep, log)
                print(json.dumps(r), flush=True)
                results.append(r)
        psql.close()
    print("\npath          enqueue/s  drain/s   ratio(enqueue)  ratio(drain)")
    for path in PATHS:
        mine = [r for r in results if r["path"] == path]
        ratios = {}
        for key in ("enqueue_items_per_s", "drain_items_per_s"):
            ratios[key] = statistics.median(
                r[key] / next(b[key] for b in results
                              if b["path"] == "superuser" and
                              b["rep"] == r["rep"]) for r in mine)
        print(f"{path:12} {statistics.median(r['enqueue_items_per_s'] for r in mine):10.0f} "
              f"{statistics.median(r['drain_items_per_s'] for r in mine):8.0f}   "
              f"{ratios['enqueue_items_per_s']:14.2f}  "
              f"{ratios['drain_items_per_s']:12.2f}")


if __name__ == "__main__":
    main()
