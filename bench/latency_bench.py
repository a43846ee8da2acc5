#!/usr/bin/env python3
"""Enqueue-to-handler latency (issue 24's protocol): an idle group of
`--members` `sqlgroup consume` members; one SQL session enqueues `--items`
single items `--gap` apart through sqlgroup.enqueue, each payload the
database clock at enqueue; the handler (`--handler sql:...`, inside the
acknowledging transaction) records the clock again. Latency = handler
clock - enqueue clock, both from the database. Per part count (16, 256,
4096 by default) prints one JSON line with p50/p90/p99/max in ms, then a
table.

Usage: bench/latency_bench.py --cli build/sqlgroup [--parts 16,256,4096]
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

SETUP = """
CREATE SCHEMA IF NOT EXISTS bench;
CREATE TABLE IF NOT EXISTS bench.latency
  (grp text, id uuid, enqueued_at timestamptz, handled_at timestamptz);
CREATE OR REPLACE FUNCTION bench.handled(k text, p bytea, i uuid)
RETURNS void LANGUAGE sql AS $$
  INSERT INTO bench.latency
  SELECT k, i, convert_from(p, 'UTF8')::timestamptz, clock_timestamp()
$$;
"""


def quantile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--parts", default="16,256,4096")
    ap.add_argument("--members", type=int, default=4)
    ap.add_argument("--items", type=int, default=300)
    ap.add_argument("--gap", type=float, default=0.03)
    args = ap.parse_args()
    cli = os.path.abspath(args.cli)
    workdir = tempfile.mkdtemp(prefix="sqlgroup-bench-latency-")
    with private_postgres(cli) as dsn:
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
                         "--handler", "sql:bench.handled", "--workers", "2",
                         "--metrics_addr", "", "--log_level", "warn"],
                        stdout=log, stderr=log))
                # Settled: every part owned, then a few idle seconds.
                deadline = time.time() + 120
                while sql("SELECT count(*) FROM sqlgroup.session_parts WHERE "
                          "group_name = '%s'" % group) != str(parts):
                    if time.time() > deadline:
                        raise RuntimeError("parts never all owned")
                    time.sleep(0.1)
                time.sleep(3)
                # One session, one item every --gap seconds (as psql would).
                script = "\n".join(
                    "SELECT sqlgroup.enqueue('%s', 'k%d', "
                    "convert_to(clock_timestamp()::text, 'UTF8'));\n"
                    "SELECT pg_sleep(%g);" % (group, n, args.gap)
                    for n in range(args.items))
                subprocess.run(["psql", dsn, "-qAt"], input=script, text=True,
                               check=True, capture_output=True)
                deadline = time.time() + 60
                while int(sql("SELECT count(*) FROM bench.latency")) < args.items:
                    if time.time() > deadline:
                        raise RuntimeError("not every item was handled in 60 s")
                    time.sleep(0.1)
                ms = [float(x) for x in sql(
                    "SELECT extract(epoch FROM handled_at - enqueued_at) * 1000 "
                    "FROM bench.latency").split()]
                sql("TRUNCATE bench.latency")
                for m in members:
                    m.send_signal(signal.SIGTERM)
                for m in members:
                    m.wait(timeout=60)
                r = {"bench": "latency", "parts": parts, "members": args.members,
                     "items": len(ms), "p50_ms": round(quantile(ms, 0.5), 2),
                     "p90_ms": round(quantile(ms, 0.9), 2),
                     "p99_ms": round(quantile(ms, 0.99), 2),
                     "max_ms": round(max(ms), 2)}
                print(json.dumps(r), flush=True)
                rows.append(r)
            print("\n| parts | items | p50 ms | p90 ms | p99 ms | max ms |")
            print("| ---: | ---: | ---: | ---: | ---: | ---: |")
            for r in rows:
                print("| %d | %d | %.1f | %.1f | %.1f | %.1f |" % (
                    r["parts"], r["items"], r["p50_ms"], r["p90_ms"],
                    r["p99_ms"], r["max_ms"]))
            print("\n%d idle members (2 workers each), one item every %g s "
                  "from one SQL session, the sql handler stamping the clock in "
                  "its acknowledging transaction." % (args.members, args.gap))
        finally:
            for m in members:
                if m.poll() is None:
                    m.kill()


if __name__ == "__main__":
    main()
