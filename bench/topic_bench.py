#!/usr/bin/env python3
"""Topics (issue 40): publish throughput and storage for 1, 2 and 4
subscribed groups, against what a producer does without topics, one
enqueue_many per group in its own transaction, same run.

On one private durable PostgreSQL, pgbench runs transactions of one batch
(100 keyed items over 100 keys, random payloads of --payload bytes) for
--seconds with --clients connections:
  publish   SELECT sqlgroup.publish_many('t', keys, payloads)
  enqueue   SELECT sqlgroup.enqueue_many('gI', keys, payloads) for each
            group, in one transaction
The modes alternate within each repetition; the items table is emptied
before each measurement. Items/s counts published items (each reaches
every group). Bytes per item: sqlgroup.items' size (heap, TOAST and
indexes) after the run over the items published, so every group's copy is
in it. Prints one JSON line per measurement and a table of medians with
publish/enqueue ratios.

Usage: bench/topic_bench.py --build build [--reps 3] [--seconds 10]
       [--clients 4] [--payload 256]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile

from private_pg import private_postgres

PGBENCH = "/usr/lib/postgresql/15/bin/pgbench"
BATCH = 100
SUBSCRIBERS = (1, 2, 4)


def psql(dsn, sql):
    return subprocess.run(["psql", dsn, "-qAtX", "-v", "ON_ERROR_STOP=1",
                           "-c", sql], check=True, capture_output=True,
                          text=True).stdout.strip()


def setup(dsn, cli, groups, payload):
    psql(dsn, "DROP TABLE IF EXISTS bench_batch; "
         "CREATE TABLE bench_batch AS SELECT "
         "array_agg('key-' || i ORDER BY i) AS keys, "
         "array_agg(decode((SELECT string_agg(lpad(to_hex((random() * 255)"
         "::int), 2, '0'), '') FROM generate_series(1, %d) WHERE i > 0), "
         "'hex') ORDER BY i) AS payloads FROM generate_series(1, %d) i"
         % (payload, BATCH))
    for g in range(max(SUBSCRIBERS)):
        subprocess.run([cli, "group", "create", f"g{g}", "--dsn", dsn],
                       capture_output=True)
    subprocess.run([cli, "topic", "create", "t", "--dsn", dsn],
                   capture_output=True)
    for g in range(max(SUBSCRIBERS)):
        subprocess.run([cli, "group", "alter", f"g{g}", "--topic", "none",
                        "--dsn", dsn], capture_output=True)
        if g < groups:
            subprocess.run([cli, "group", "alter", f"g{g}", "--topic", "t",
                            "--dsn", dsn], check=True, capture_output=True)


def script(mode, groups):
    batch = "(SELECT keys FROM bench_batch), (SELECT payloads FROM bench_batch)"
    if mode == "publish":
        return f"SELECT count(*) FROM sqlgroup.publish_many('t', {batch});\n"
    calls = "".join(f"SELECT count(*) FROM sqlgroup.enqueue_many('g{g}', "
                    f"{batch});\n" for g in range(groups))
    return f"BEGIN;\n{calls}COMMIT;\n"


def measure(dsn, mode, groups, args):
    psql(dsn, "TRUNCATE sqlgroup.items; CHECKPOINT")
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as f:
        f.write(script(mode, groups))
        f.flush()
        out = subprocess.run(
            [PGBENCH, "-n", "-f", f.name, "-c", str(args.clients), "-j",
             str(args.clients), "-T", str(args.seconds), dsn],
            check=True, capture_output=True, text=True).stdout
    tps = float(re.search(r"tps = ([0-9.]+)", out).group(1))
    items = int(psql(dsn, "SELECT count(*) FROM sqlgroup.items"))
    size = int(psql(dsn, "SELECT pg_total_relation_size('sqlgroup.items')"))
    published = items // groups
    return {"mode": mode, "groups": groups, "payload": args.payload,
            "clients": args.clients, "items_per_s": tps * BATCH,
            "rows": items, "bytes_per_item": size / max(published, 1)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--payload", type=int, default=256)
    args = parser.parse_args()
    cli = os.path.join(args.build, "sqlgroup")
    results = []
    with private_postgres(cli) as dsn:
        for groups in SUBSCRIBERS:
            setup(dsn, cli, groups, args.payload)
            for rep in range(args.reps):
                modes = (["publish", "enqueue"] if rep % 2 == 0
                         else ["enqueue", "publish"])
                for mode in modes:
                    r = measure(dsn, mode, groups, args)
                    r["rep"] = rep
                    print(json.dumps(r), flush=True)
                    results.append(r)
    print("\n| groups | publish items/s | enqueue per group items/s | "
          "publish / enqueue | publish bytes/item | enqueue bytes/item |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for groups in SUBSCRIBERS:
        med = {(m, k): statistics.median(r[k] for r in results
                                         if r["groups"] == groups and
                                         r["mode"] == m)
               for m in ("publish", "enqueue")
               for k in ("items_per_s", "bytes_per_item")}
        print("| %d | %.0f | %.0f | %.2f | %.0f | %.0f |" % (
            groups, med["publish", "items_per_s"],
            med["enqueue", "items_per_s"],
            med["publish", "items_per_s"] / med["enqueue", "items_per_s"],
            med["publish", "bytes_per_item"],
            med["enqueue", "bytes_per_item"]))
    print("\nMedians of %d runs of %d s each, %d connections, batches of %d "
          "keyed items with %d-byte random payloads, durable commits."
          % (args.reps, args.seconds, args.clients, BATCH, args.payload))


if __name__ == "__main__":
    main()
