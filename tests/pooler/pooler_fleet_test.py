#!/usr/bin/env python3
"""A fleet of `sqlgroup consume` processes with default settings through a
PgBouncer 1.18 in transaction mode (issue 41): no --pool_mode, so each
member must find the pooler by itself (--pool_mode auto).

- every keyed item is acknowledged exactly once and in key order (the
  `count` handler's tallies), none dead;
- each member says once that it found a pooler, and nothing about prepared
  statements that exist already or not at all (before auto, 120 members
  wrote 78,365 such warnings and crawled);
- every member exits 0 on SIGTERM.

The drain time is printed (the comparison with --pool_mode transaction is
bench/connections_bench.py --scenario pooled,pooled_auto).

Usage: pooler_fleet_test.py --cli build/sqlgroup [--members 120]
         [--items 6000]
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "chaos"))
sys.path.insert(0, os.path.join(HERE, "..", "support"))

from pgbouncer import PgBouncer  # noqa: E402
from pgnode import PgNode, make_root, scalar  # noqa: E402

# What a member logs when it finds a pooler (src/pool_mode.cc).
FOUND = "connects through a connection pooler"


def fail(msg):
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cli", required=True)
    p.add_argument("--members", type=int, default=120)
    p.add_argument("--items", type=int, default=6000)
    p.add_argument("--parts", type=int, default=64)
    p.add_argument("--timeout", type=float, default=300)
    args = p.parse_args()

    root = make_root()
    pg = PgNode.primary(root)
    bouncer = None
    procs = []
    try:
        direct = f"host=127.0.0.1 port={pg.port} dbname=chaos user=postgres"

        def cli(*argv):
            r = subprocess.run([args.cli, *argv, "--dsn", direct],
                               capture_output=True, text=True, timeout=120)
            if r.returncode != 0:
                fail(f"sqlgroup {' '.join(argv)}: {r.stderr}")

        cli("migrate")
        cli("group", "create", "g", "--parts", str(args.parts))
        cli("produce", "--group", "g", "--generate", "--count",
            str(args.items), "--keys", "100")
        bouncer = PgBouncer(pg.port, "transaction", 20,
                            max_client_conn=10 * args.members).start()
        pooled = bouncer.dsn("chaos")
        t0 = time.monotonic()
        for i in range(args.members):
            log = open(os.path.join(root, f"m{i}.log"), "w")
            procs.append(subprocess.Popen(
                [args.cli, "consume", "--group", "g", "--handler", "count",
                 "--metrics_addr", "", "--dsn", pooled],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL))
            log.close()
            time.sleep(0.02)
        drained = None
        while time.monotonic() - t0 < args.timeout:
            if scalar(pg.port, "SELECT count(*) FROM sqlgroup.items") == "0":
                drained = time.monotonic() - t0
                break
            dead = [i for i, proc in enumerate(procs)
                    if proc.poll() is not None]
            if dead:
                with open(os.path.join(root, f"m{dead[0]}.log")) as f:
                    fail(f"{len(dead)} member(s) exited early; m{dead[0]}: "
                         f"{f.read()[-2000:]}")
            time.sleep(0.2)
        if drained is None:
            left = scalar(pg.port, "SELECT count(*) FROM sqlgroup.items")
            fail(f"{left} of {args.items} items still waiting after "
                 f"{args.timeout:.0f} s")
        counted = int(scalar(pg.port, "SELECT coalesce(sum(n), 0) FROM "
                                      "sqlgroup_demo.counters"))
        out_of_order = int(scalar(pg.port, "SELECT coalesce(sum("
                                           "order_violations), 0) FROM "
                                           "sqlgroup_demo.counters"))
        dead = int(scalar(pg.port, "SELECT count(*) FROM sqlgroup.dead_items"))
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        codes = []
        for proc in procs:
            try:
                codes.append(proc.wait(timeout=120))
            except subprocess.TimeoutExpired:
                proc.kill()
                codes.append(-9)
        found, prepared, pooler_lines = [], 0, 0
        for i in range(args.members):
            with open(os.path.join(root, f"m{i}.log"), errors="replace") as f:
                text = f.read()
            found.append(text.count(FOUND))
            prepared += text.count("prepared statement")
            pooler_lines += sum(1 for line in text.splitlines()
                                if "pooler" in line)
        print(f"{args.members} members through PgBouncer (transaction mode, "
              f"pool 20), default settings: {args.items} items drained in "
              f"{drained:.1f} s from the first start; acknowledged "
              f"{counted}, out of order {out_of_order}, dead {dead}; "
              f"lines about the pooler {pooler_lines} "
              f"({pooler_lines / args.members:.2f} per member); about "
              f"prepared statements {prepared}; clean exits "
              f"{codes.count(0)}", flush=True)
        if counted != args.items or out_of_order or dead:
            fail("not exactly once in key order")
        if any(n != 1 for n in found):
            fail(f"members that did not say once that they found the pooler: "
                 f"{sum(1 for n in found if n != 1)}")
        if prepared:
            fail(f"{prepared} lines about prepared statements")
        if pooler_lines > 3 * args.members:
            fail(f"{pooler_lines} lines about the pooler")
        if codes.count(0) != args.members:
            fail(f"exit codes: {sorted(set(codes))}")
        print("OK", flush=True)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        if bouncer:
            bouncer.close()
        pg.remove()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
