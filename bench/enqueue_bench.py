#!/usr/bin/env python3
"""Enqueue throughput with idempotence on and off (issue 23), same run: one
connection enqueues batches of 1 and of 500 keyed items, each batch its own
transaction, plain (no idempotency key) or keyed (a key per batch, the
previous one forgotten, as Producer does), on one private durable
PostgreSQL. Modes alternate within each repetition and the items table is
emptied before each measurement. Prints one JSON line per measurement and
a table of medians with keyed/plain ratios.

Usage: bench/enqueue_bench.py --build build [--reps 3] [--seconds 5]
"""
import argparse
import json
import os
import statistics
import subprocess

from private_pg import private_postgres


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5)
    args = parser.parse_args()
    cli = os.path.join(args.build, "sqlgroup")
    harness = os.path.join(args.build, "bench", "sqlgroup_bench")
    with private_postgres(cli) as dsn:
        results = []
        for rep in range(args.reps):
            for batch in (1, 500):
                modes = ["plain", "keyed"] if rep % 2 == 0 else ["keyed", "plain"]
                for mode in modes:
                    subprocess.run(["psql", dsn, "-qc",
                                    "TRUNCATE sqlgroup.items; "
                                    "DELETE FROM sqlgroup.enqueue_keys; "
                                    "CHECKPOINT"], check=True)
                    out = subprocess.run(
                        [harness, "enqueue", "--dsn=" + dsn, "--mode=" + mode,
                         "--batch=%d" % batch, "--seconds=%g" % args.seconds],
                        check=True, capture_output=True, text=True).stdout
                    r = json.loads(out.strip().splitlines()[-1])
                    r["rep"] = rep
                    print(json.dumps(r), flush=True)
                    results.append(r)
        print("\n| batch | plain items/s | keyed items/s | keyed / plain |")
        print("| ---: | ---: | ---: | ---: |")
        for batch in (1, 500):
            med = {m: statistics.median(r["items_per_s"] for r in results
                                        if r["batch"] == batch and
                                        r["mode"] == m)
                   for m in ("plain", "keyed")}
            print("| %d | %.0f | %.0f | %.2f |" % (
                batch, med["plain"], med["keyed"], med["keyed"] / med["plain"]))
        print("\nMedians of %d runs of %g s each, one connection, durable "
              "commits." % (args.reps, args.seconds))


if __name__ == "__main__":
    main()
