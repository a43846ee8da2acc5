#!/usr/bin/env python3
"""Enqueue-to-handler latency (issue 24's protocol): an idle group of
`--members` `sqlgroup consume` members; one SQL session enqueues `--items`
single items `--gap` apart through sqlgroup.enqueue, each payload the
database clock at enqueue; the handler (`--handler sql:...`, inside the
acknowledging transaction) records the clock again. Latency = handler
clock - enqueue clock, both from the database. Per part count (16, 256,
4096 by default) prints one JSON line with p50/p90/p99/max in ms, then a
table.

Stages: the members run with --log_level trace, whose per-claim lines say
when the announcement was heard, the worker took the claim, had a
connection and had the items, and when each handler began (unix
microseconds, the same clock as the database's on this machine). Each
item's latency splits into: enqueue -> heard (the enqueue's commit and the
NOTIFY's delivery to the control thread; of which enqueue -> committed,
when the enqueuing session's next statement began, a round trip after
its commit), heard -> task (to a worker,
through a probe when the announcement did not say where), task ->
connected (a connection opened or borrowed), connected -> claimed (the
claim), claimed -> handler (to the worker that handles it), handler ->
stamp (the handler's transaction up to its clock read). The median and
p99 of each stage are printed per part count.

`--rate R`: a second session enqueues R load items/s over 1,000 keys
through sqlgroup.enqueue_many, in batches of `--load_batch` (by default
R/20 every 50 ms, as `sqlgroup produce --rate` sends them; see
rate_load.py), while the measured items are enqueued; the handler records
only the measured ones. bench/peers/graphile_bench.py runs graphile-worker
under the same protocol and load.

Usage: bench/latency_bench.py --cli build/sqlgroup [--parts 16,256,4096]
       [--rate 1500]
"""
import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import tempfile
import time

from private_pg import private_postgres
from rate_load import add_protocol_args, load_batch, rate_reached, start_load

SETUP = """
CREATE SCHEMA IF NOT EXISTS bench;
CREATE TABLE IF NOT EXISTS bench.latency
  (grp text, id uuid, enqueued_at timestamptz, handled_at timestamptz);
CREATE OR REPLACE FUNCTION bench.handled(k text, p bytea, i uuid)
RETURNS void LANGUAGE sql AS $$
  INSERT INTO bench.latency
  SELECT k, i, convert_from(p, 'UTF8')::timestamptz, clock_timestamp()
  WHERE p <> ''  -- a load item (--rate): not measured
$$;
"""


def quantile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


STAGES = ["enqueue->heard", "heard->task", "task->connected",
          "connected->claimed", "claimed->handler", "handler->stamp"]
COLUMNS = STAGES[:1] + ["enqueue->committed"] + STAGES[1:]


def stage_breakdown(rows_db, logs, committed):
    """p50/p99 ms of each stage, from the members' trace lines (see the
    module's doc) joined with the items' database clocks by id;
    `committed`: id -> the enqueuing session's clock after the commit."""
    claims, handlers = {}, {}
    # Which member's worker read each item, and which handled it.
    claim_worker, handler_worker = {}, {}
    for path in logs:
        with open(path) as f:
            for line in f:
                if "stages part=" in line:
                    kv = dict(w.split("=", 1) for w in line.split()
                              if "=" in w)
                    for i in kv["ids"].split(","):
                        claims[i] = [int(kv[k]) for k in
                                     ("heard", "task", "connected", "claimed")]
                        claim_worker[i] = (path, kv.get("worker"))
                elif " handler " in line and " ids=" in line:
                    kv = dict(w.split("=", 1) for w in line.split()
                              if "=" in w)
                    for i in kv["ids"].split(","):
                        handlers.setdefault(i, int(kv["at"]))
                        handler_worker.setdefault(i, (path, kv.get("worker")))
    per = {k: [] for k in COLUMNS}
    n = same = 0
    for i, enq, handled in rows_db:
        if i in committed:
            per["enqueue->committed"].append((committed[i] - float(enq)) / 1000)
        c, h = claims.get(i), handlers.get(i)
        if c is None or h is None or c[0] == 0:
            continue  # not announced (found by a poll), or no line
        n += 1
        same += claim_worker.get(i) == handler_worker.get(i)
        points = [float(enq)] + c + [h, float(handled)]
        for k, a, b in zip(STAGES, points, points[1:]):
            per[k].append((b - a) / 1000)
    # The share of items handled by the worker that read them (its
    # connection and thread warm) rather than handed to another.
    out = {"n": n, "same_worker": round(same / n, 2) if n else 0}
    for k, xs in per.items():
        out[k] = [round(quantile(xs, 0.5), 2), round(quantile(xs, 0.99), 2)] \
            if xs else [0, 0]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--parts", default="16,256,4096")
    ap.add_argument("--members", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2,
                    help="workers per member")
    ap.add_argument("--dsn", default="",
                    help="a running PostgreSQL, migrated, instead of a "
                    "private one (e.g. with pg_stat_statements loaded)")
    add_protocol_args(ap)
    args = ap.parse_args()
    batch = load_batch(args)
    cli = os.path.abspath(args.cli)
    workdir = tempfile.mkdtemp(prefix="sqlgroup-bench-latency-")
    server = (contextlib.nullcontext(args.dsn) if args.dsn
              else private_postgres(cli))
    with server as dsn:
        members = []
        try:
            sql = lambda q: subprocess.run(["psql", dsn, "-qAtc", q], check=True,
                                           capture_output=True,
                                           text=True).stdout.strip()
            sql(SETUP)
            rows = []
            for parts in [int(p) for p in args.parts.split(",")]:
                group = "lat%d" % parts
                subprocess.run([cli, "group", "create", group, "--parts",
                                str(parts), "--dsn", dsn], check=True,
                               capture_output=True)
                members = []
                for i in range(args.members):
                    log = open(os.path.join(workdir, "%s-m%d.log" % (group, i)),
                               "w")
                    members.append(subprocess.Popen(
                        [cli, "consume", "--dsn", dsn, "--group", group,
                         "--handler", "sql:bench.handled",
                         "--workers", str(args.workers),
                         "--metrics_addr", "", "--log_level", "trace"],
                        stdout=log, stderr=log))
                # Settled: every part owned, then a few idle seconds.
                deadline = time.time() + 120
                while sql("SELECT count(*) FROM sqlgroup.session_parts WHERE "
                          "group_name = '%s'" % group) != str(parts):
                    if time.time() > deadline:
                        raise RuntimeError("parts never all owned")
                    time.sleep(0.1)
                time.sleep(3)
                load = None
                if args.rate:
                    # Long enough to outlast the measured enqueues; steady
                    # before they start.
                    load = start_load(
                        dsn, 4 + args.items * args.gap * 1.5,
                        "PERFORM sqlgroup.enqueue_many('%s', array_agg('L' "
                        "|| (random() * 1000)::int), array_agg(''::bytea)) "
                        "FROM generate_series(1, %d)" % (group, batch),
                        batch, args.rate)
                    time.sleep(2)
                # One session, one item every --gap seconds (as psql would).
                # The clock read right after each enqueue: when its commit
                # was done (a round trip late), printed, not written.
                script = "\n".join(
                    "SELECT sqlgroup.enqueue('%s', 'k%d', "
                    "convert_to(clock_timestamp()::text, 'UTF8'));\n"
                    "SELECT extract(epoch FROM clock_timestamp()) * 1e6;\n"
                    "SELECT pg_sleep(%g);" % (group, n, args.gap)
                    for n in range(args.items))
                out = subprocess.run(["psql", dsn, "-qAt"], input=script,
                                     text=True, check=True,
                                     capture_output=True).stdout.split()
                committed = {out[k]: float(out[k + 1])
                             for k in range(0, len(out) - 1, 2)}
                achieved = rate_reached(load) if load else None
                deadline = time.time() + 60
                while int(sql("SELECT count(*) FROM bench.latency")) < args.items:
                    if time.time() > deadline:
                        raise RuntimeError("not every item was handled in 60 s")
                    time.sleep(0.1)
                rows_db = [line.split("|") for line in sql(
                    "SELECT id, extract(epoch FROM enqueued_at) * 1e6, "
                    "extract(epoch FROM handled_at) * 1e6 "
                    "FROM bench.latency").splitlines()]
                ms = [(float(h) - float(e)) / 1000 for _, e, h in rows_db]
                sql("TRUNCATE bench.latency")
                for m in members:
                    m.send_signal(signal.SIGTERM)
                for m in members:
                    m.wait(timeout=60)
                # A shared server (--dsn) is left as it was found.
                subprocess.run([cli, "group", "delete", group, "--dsn", dsn],
                               check=True, capture_output=True)
                stages = stage_breakdown(
                    rows_db, [os.path.join(workdir, "%s-m%d.log" % (group, i))
                              for i in range(args.members)], committed)
                r = {"bench": "latency", "parts": parts, "members": args.members,
                     "items": len(ms), "p50_ms": round(quantile(ms, 0.5), 2),
                     "p90_ms": round(quantile(ms, 0.9), 2),
                     "p99_ms": round(quantile(ms, 0.99), 2),
                     "max_ms": round(max(ms), 2), "stages": stages}
                if args.rate:
                    r.update(rate=args.rate, load_rate=achieved,
                             load_batch=batch)
                print(json.dumps(r), flush=True)
                rows.append(r)
            print("\n| parts | items | p50 ms | p90 ms | p99 ms | max ms |")
            print("| ---: | ---: | ---: | ---: | ---: | ---: |")
            for r in rows:
                print("| %d | %d | %.1f | %.1f | %.1f | %.1f |" % (
                    r["parts"], r["items"], r["p50_ms"], r["p90_ms"],
                    r["p99_ms"], r["max_ms"]))
            print("\nStages, ms (p50 / p99; n: items whose lines were found):")
            print("\n| parts | n | " + " | ".join(COLUMNS) + " |")
            print("| ---: | ---: |" + " ---: |" * len(COLUMNS))
            for r in rows:
                st = r["stages"]
                print("| %d | %d | " % (r["parts"], st["n"]) + " | ".join(
                    "%.2f / %.2f" % tuple(st[k]) for k in COLUMNS) + " |")
            print("\n%d members (%d workers each), idle but for %d load "
                  "items/s, one item every %g s from one SQL session, the sql "
                  "handler stamping the clock in its acknowledging "
                  "transaction." % (args.members, args.workers, args.rate,
                                    args.gap))
        finally:
            for m in members:
                if m.poll() is None:
                    m.kill()


if __name__ == "__main__":
    main()
