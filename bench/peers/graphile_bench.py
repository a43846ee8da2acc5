#!/usr/bin/env python3
"""Peer benchmark, optional: graphile-worker's enqueue-to-task-start
latency under bench/latency_bench.py's protocol, on the same machine and
the same private durable PostgreSQL (`sqlgroup postgres --durable`). One
graphile-worker pool in library mode (`--concurrency` 4, its defaults
otherwise: LISTEN/NOTIFY, 2 s poll) idles; one SQL session enqueues
`--items` jobs `--gap` apart through graphile_worker.add_job, each payload
the database clock at enqueue; the task (graphile_latency.js) reads the
clock first thing. Latency = task-start clock - enqueue clock (the node
and database clocks are this machine's). Prints one JSON line with
p50/p90/p99/max in ms, then a table.

`--rate R`: a second session enqueues R load jobs/s through add_jobs,
evenly spaced, in batches of `--load_batch` (by default R/20 every 50 ms,
as `sqlgroup produce --rate` sends them), while the measured jobs are
enqueued; only the measured ones (m=true in the payload) are reported,
with the load rate reached. `--drain N`: instead of latency, graphile's
throughput: N no-op jobs enqueued in one add_jobs call, then the pool
started and timed from the first task's start to the last completion.

graphile-worker and pg are installed with npm into `--cache` (reused when
present), never into the repository; graphile-worker 0.18 wants Node 22,
so on Node 20 npm picks the newest release that runs (0.17.x). Exits 2
with a sentence saying so when npm cannot install it.

Usage: bench/peers/graphile_bench.py --cli build/sqlgroup [--rate 1500]
       [--drain 20000]
"""
import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
from datetime import datetime

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from latency_bench import quantile  # noqa: E402  (same quantiles as ours)
from private_pg import private_postgres  # noqa: E402
from rate_load import (add_protocol_args, load_batch, rate_reached,  # noqa: E402
                       start_load)

# A job spec in add_jobs' own type, so the load and the backlog go through
# graphile's API (and its NOTIFY) like add_job does.
SPEC = ("json_populate_record(null::graphile_worker.job_spec, "
        "json_build_object('identifier', 'lat', 'payload', "
        "json_build_object('m', false)))")
def install(cache):
    if not os.path.exists(os.path.join(cache, "node_modules", "graphile-worker",
                                       "package.json")):
        os.makedirs(cache, exist_ok=True)
        r = subprocess.run(["npm", "install", "--prefix", cache, "--no-audit",
                            "--no-fund", "--loglevel=error", "graphile-worker",
                            "pg"], capture_output=True, text=True)
        if r.returncode != 0:
            sys.stderr.write(r.stderr)
            print("graphile-worker could not be installed with npm into %s, "
                  "so this optional peer benchmark did not run." % cache)
            sys.exit(2)
    return os.path.join(cache, "node_modules")


def url_of(dsn):
    """libpq key=value DSN -> postgres:// URL (node-postgres reads URLs)."""
    kv = dict(w.split("=", 1) for w in shlex.split(dsn))
    q = lambda k, d="": urllib.parse.quote(kv.get(k, d), safe="")
    auth = q("user", "postgres") + (":" + q("password") if "password" in kv
                                     else "")
    return "postgres://%s@%s:%s/%s" % (auth, kv.get("host", "127.0.0.1"),
                                       kv.get("port", "5432"),
                                       q("dbname", "postgres"))


def start_worker(modules, url, out, args, drain=0, items=None, extra=(),
                 stdout=subprocess.PIPE, stderr=None):
    """graphile_latency.js at args.concurrency, for `items` jobs
    (args.items by default), with `extra` flags."""
    env = dict(os.environ, NODE_PATH=modules)
    return subprocess.Popen(
        ["node", os.path.join(HERE, "graphile_latency.js"), "--connection", url,
         "--out", out, "--concurrency", str(args.concurrency),
         "--items", str(args.items if items is None else items),
         "--drain", str(drain)] + list(extra),
        env=env, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL,
        text=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--concurrency", type=int, default=4)
    add_protocol_args(ap)
    ap.add_argument("--drain", type=int, default=0)
    ap.add_argument("--cache", default=os.path.expanduser(
        "~/.cache/sqlgroup-bench-peers/graphile"))
    args = ap.parse_args()
    batch = load_batch(args)
    modules = install(args.cache)
    workdir = tempfile.mkdtemp(prefix="sqlgroup-bench-graphile-")
    out = os.path.join(workdir, "result.json")
    with private_postgres(os.path.abspath(args.cli)) as dsn:
        url = url_of(dsn)
        sql = lambda q: subprocess.run(["psql", dsn, "-qAtc", q], check=True,
                                       capture_output=True,
                                       text=True).stdout.strip()
        # The schema first, so a backlog can be enqueued before any worker.
        subprocess.run([os.path.join(modules, ".bin", "graphile-worker"),
                        "--schema-only", "-c", url], check=True,
                       capture_output=True)
        if args.drain:
            sql("SELECT graphile_worker.add_jobs(array_agg(%s)) "
                "FROM generate_series(1, %d)" % (SPEC, args.drain))
        worker = start_worker(modules, url, out, args, args.drain)
        load = None
        try:
            if worker.stdout.readline().strip() != "ready":
                raise RuntimeError("graphile-worker did not start")
            if not args.drain:
                # Idle and listening: its LISTEN has run, then a few quiet
                # seconds, as latency_bench.py waits for its members.
                deadline = time.time() + 30
                while sql("SELECT count(*) FROM pg_stat_activity WHERE state "
                          "= 'idle' AND query LIKE 'LISTEN%'") == "0":
                    if time.time() > deadline:
                        raise RuntimeError("graphile-worker never listened")
                    time.sleep(0.1)
                time.sleep(3)
                if args.rate:
                    # Long enough to outlast the measured enqueues.
                    seconds = 4 + args.items * args.gap * 1.5
                    load = start_load(
                        dsn, seconds,
                        "PERFORM graphile_worker.add_jobs(array_agg(%s)) "
                        "FROM generate_series(1, %d)" % (SPEC, batch),
                        batch, args.rate)
                    time.sleep(2)  # the load is steady before we measure
                # One session, one job every --gap seconds (as psql would).
                script = "\n".join(
                    "SELECT graphile_worker.add_job('lat', json_build_object("
                    "'t', clock_timestamp()::text, 'm', true));\n"
                    "SELECT pg_sleep(%g);" % args.gap for _ in range(args.items))
                subprocess.run(["psql", dsn, "-qAt"], input=script, text=True,
                               check=True, capture_output=True)
            worker.wait(timeout=600 if args.drain else 60)
            achieved = rate_reached(load) if load else None
        finally:
            for p in (worker, load):
                if p and p.poll() is None:
                    p.kill()
        with open(out) as f:
            res = json.load(f)
        shutil.rmtree(workdir)
    if args.drain:
        secs = (res["last_us"] - res["first_us"]) / 1e6
        r = {"bench": "throughput_peer", "system": "graphile-worker",
             "version": res["version"], "concurrency": res["concurrency"],
             "jobs": res["drained"], "seconds": round(secs, 2),
             "jobs_per_s": round(res["drained"] / secs)}
        print(json.dumps(r), flush=True)
        print("\n| system | concurrency | jobs | jobs/s |")
        print("| --- | ---: | ---: | ---: |")
        print("| graphile-worker %s | %d | %d | %d |" % (
            r["version"], r["concurrency"], r["jobs"], r["jobs_per_s"]))
        print("\nA backlog of %d no-op jobs (one add_jobs call) drained from "
              "the first task's start to the last completion." % args.drain)
        return
    enq = [datetime.fromisoformat(t).timestamp() * 1e6
           for _, t, _ in res["records"]]
    ms = [(at - e) / 1000 for (at, _, _), e in zip(res["records"], enq)]
    r = {"bench": "latency_peer", "system": "graphile-worker",
         "version": res["version"], "concurrency": res["concurrency"],
         "rate": args.rate, "items": len(ms),
         "p50_ms": round(quantile(ms, 0.5), 2),
         "p90_ms": round(quantile(ms, 0.9), 2),
         "p99_ms": round(quantile(ms, 0.99), 2), "max_ms": round(max(ms), 2),
         "notifications": res["notifications"]}
    if args.rate:
        r["load_rate"] = achieved
        r["load_batch"] = batch
    else:
        # Stages, as latency_bench.py's first and the rest together: the
        # enqueue's commit and the NOTIFY's delivery to node, then graphile
        # (get_job and the call into the task). Under load the last NOTIFY
        # heard is mostly a load job's, so only idle runs have them.
        heard = [(h - e) / 1000 for (_, _, h), e in zip(res["records"], enq)]
        pick = [(at - h) / 1000 for at, _, h in res["records"]]
        r["stages"] = {k: [round(quantile(xs, 0.5), 2),
                           round(quantile(xs, 0.99), 2)]
                       for k, xs in (("enqueue->heard", heard),
                                     ("heard->task", pick))}
    print(json.dumps(r), flush=True)
    print("\n| system | concurrency | rate | items | p50 ms | p90 ms | p99 ms "
          "| max ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    print("| graphile-worker %s | %d | %d | %d | %.1f | %.1f | %.1f | %.1f |" % (
        r["version"], r["concurrency"], args.rate, r["items"], r["p50_ms"],
        r["p90_ms"], r["p99_ms"], r["max_ms"]))
    if "stages" in r:
        print("\nStages, ms (p50 / p99): " + ", ".join(
            "%s %.2f / %.2f" % (k, *v) for k, v in r["stages"].items()))
    print("\nOne graphile-worker pool (concurrency %d) idle but for %d load "
          "jobs/s, one job every %g s from one SQL session, the task reading "
          "the clock as it starts." % (args.concurrency, args.rate, args.gap))


if __name__ == "__main__":
    main()
