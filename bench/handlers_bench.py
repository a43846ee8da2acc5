#!/usr/bin/env python3
"""Handler benchmark (issue 26): items per second through one `sqlgroup
consume` member (4 workers) for each kind of handler, in one run on one
private durable PostgreSQL, against the library's in-process handlers:

  noop    in-process, writes nothing: the fenced delete alone
  record  in-process C++ writing one row per item in the acknowledging
          transaction (the library's handler of the same work as sql)
  sql     sql:bench.record: a SQL function writing the same row, called
          by the statement that acknowledges the item (one round trip)
  sql_grouped  the same with --sql_calls_per_commit 32: each worker groups
          up to 32 calls into one transaction, each under a savepoint
  sql_tx  sql:SELECT bench.record($1, $2, $3): the same call as a statement
          of its own in the acknowledging transaction (BEGIN, the
          statement, the ack, COMMIT: sql:FUNCTION's path before session 19)
  exec    exec:python3 -c ...: one Python process per worker answering ok
  http    http://127.0.0.1:PORT/: a Python ThreadingHTTPServer answering 200
          (tests/support/http_receiver.py)

Per repetition and kind: --items unkeyed items are enqueued first, then the
member starts; the rate is items over the time from its first
acknowledgement to the last (read from the database). The order of the
kinds rotates per repetition. Prints one JSON line per measurement, then a
table of medians with each kind's ratio to noop.

Usage: bench/handlers_bench.py --cli build/sqlgroup [--reps 3] [--items 20000]
       [--kinds noop,record,sql,sql_tx,exec,http]
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
HERE = os.path.dirname(os.path.abspath(__file__))
KINDS = ["noop", "record", "sql", "sql_grouped", "sql_tx", "exec", "http"]
ECHO_OK = "import sys\nfor line in sys.stdin:\n    print('ok', flush=True)\n"

BENCH_SQL = """
CREATE SCHEMA IF NOT EXISTS bench;
CREATE TABLE IF NOT EXISTS bench.results
  (item_id uuid, key text, payload bytea,
   acked_at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE OR REPLACE FUNCTION bench.record(k text, p bytea, i uuid)
RETURNS void LANGUAGE sql AS
$$ INSERT INTO bench.results (item_id, key, payload) VALUES (i, k, p) $$;
"""


def sh(*args):
    return subprocess.run(args, check=True, capture_output=True,
                          text=True).stdout


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cli", required=True)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--items", type=int, default=20000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--kinds", default=",".join(KINDS))
    ARGS = parser.parse_args()
    kinds = ARGS.kinds.split(",")
    if "noop" not in kinds or not set(kinds) <= set(KINDS):
        parser.error("--kinds: noop (the baseline) and any of %s"
                     % ", ".join(KINDS))
    cli = os.path.abspath(ARGS.cli)
    workdir = tempfile.mkdtemp(prefix="sqlgroup-bench-handlers-")
    with private_postgres(cli) as dsn:
        receiver = None
        try:
            sql = lambda q: sh("psql", dsn, "-qAtc", q).strip()
            sql(BENCH_SQL)
            receiver = subprocess.Popen(
                ["python3", os.path.join(HERE, "..", "tests", "support",
                                         "http_receiver.py"), os.devnull],
                stdout=subprocess.PIPE, text=True)
            port = receiver.stdout.readline().split()[1]
            handlers = {
                "noop": "noop", "record": "record", "sql": "sql:bench.record",
                "sql_grouped": "sql:bench.record",
                "sql_tx": "sql:SELECT bench.record($1, $2, $3)",
                "exec": "exec:python3 -c \"%s\"" % ECHO_OK,
                "http": "http://127.0.0.1:%s/" % port}
            results = []
            for rep in range(ARGS.reps):
                order = kinds[rep % len(kinds):] + kinds[:rep % len(kinds)]
                for kind in order:
                    group = "h-%s-%d" % (kind, rep)
                    sh(cli, "group", "create", group, "--parts", "16",
                       "--ordering", "none", "--dsn", dsn)
                    sh(cli, "produce", "--group", group, "--count",
                       str(ARGS.items), "--dsn", dsn)
                    log = open(os.path.join(workdir, group + ".log"), "w")
                    member = subprocess.Popen(
                        [cli, "consume", "--dsn", dsn, "--group", group,
                         "--handler", handlers[kind], "--workers",
                         str(ARGS.workers), "--max_connections",
                         str(1 + ARGS.workers), "--metrics_addr", "",
                         "--log_level", "warn"] +
                        (["--sql_calls_per_commit", "32"]
                         if kind == "sql_grouped" else []),
                        stdout=log, stderr=log, stdin=subprocess.DEVNULL)
                    # From the moment its parts are owned (it claims at once)
                    # until the last item is gone: start-up is not the
                    # handler's cost.
                    deadline = time.monotonic() + 600
                    started = None
                    while True:
                        owned, left = sql(
                            "SELECT (SELECT count(*) FROM sqlgroup.session_parts "
                            "WHERE group_name = '%s'), (SELECT count(*) FROM "
                            "sqlgroup.items WHERE group_name = '%s')"
                            % (group, group)).split("|")
                        now = time.monotonic()
                        if started is None and owned == "16":
                            started = now
                        if left == "0":
                            break
                        if now > deadline or member.poll() is not None:
                            raise RuntimeError("%s did not drain; see %s"
                                               % (kind, log.name))
                        time.sleep(0.02)
                    member.send_signal(signal.SIGTERM)
                    member.wait(timeout=60)
                    seconds = now - (started or now)
                    r = {"bench": "handlers", "rep": rep, "kind": kind,
                         "items": ARGS.items, "seconds": round(seconds, 3),
                         "items_per_s": round(ARGS.items / max(seconds, 1e-3))}
                    print(json.dumps(r), flush=True)
                    results.append(r)
            med = {k: statistics.median(r["items_per_s"] for r in results
                                        if r["kind"] == k) for k in kinds}
            print("\n| handler | items/s, median of %d | ratio to noop |"
                  % ARGS.reps)
            print("| --- | ---: | ---: |")
            for k in kinds:
                print("| %s | %d | %.2f |" % (k, med[k], med[k] / med["noop"]))
            print("\nOne member, %d workers, %d unkeyed items per run, 16 parts."
                  % (ARGS.workers, ARGS.items))
        finally:
            if receiver:
                receiver.kill()


if __name__ == "__main__":
    main()
