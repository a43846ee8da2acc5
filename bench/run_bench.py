#!/usr/bin/env python3
"""The benchmark suite (issue 6): sqlgroup against the SKIP LOCKED queue of
seed 004 and PostgreSQL's own delete limit, in one run on one private,
default-durability PostgreSQL.

Sections (each prints one JSON line per measurement as it goes, then a
table at the end):
  throughput  items acknowledged/s, noop handler, 16-byte payloads, backlog
              produced beforehand, for each consumer count (= connections
              doing the work; sqlgroup: one member with that many workers):
              sqlgroup (one transaction per item), sqlgroup_batch (the batch
              handler, `--batch` items per transaction), skiplocked and
              skiplocked_batch (the seed's queue), limit and limit_batch
              (deleting known rows by primary key, 1 or `--batch` per
              statement), readlimit and readlimit_batch (a queue's floor:
              deleting the next rows of a range and returning them, one
              autocommit statement, no fence, committed before any
              handler). Medians over the repetitions, ratios to the
              baseline, the limit and the floor of the same mode, and lock
              waits sampled from pg_stat_activity every 20 ms.
  claim       claim latency (p50, p99) of a 64-item claim against backlogs
              of 10 thousand up to 10 million waiting items, with the ids
              the producer makes and, as the baseline, random UUIDs.
  rebalance   join / graceful leave / kill -9 of `sqlgroup consume`
              processes: ms until every part is owned by its lexical target,
              and until an item in every part was acknowledged after that;
              parts moved against the minimum; with NOTIFY and polling only.
  footprint   peak RSS and connections of one `sqlgroup consume` owning 1
              and 64 parts.
  keyed       keyed items (issue 19), one Consumer with `--keyed_consumers`
              workers (8), per-item and batch handler, each repetition
              running side by side: items over `--keys` keys (1,000) against
              unkeyed items, both in groups of ordering 'key'; the same keys
              under ordering 'none'; and a hot key carrying `--hot_share`
              (half) of the items, the rest over the other 999 keys: the
              other keys' items/s against the even spread's, and the hot
              key's own. Backlogs loaded through the Producer, each in its
              own group (kb_<items>_<ordering>), kept and topped up.

Usage:
  bench/run_bench.py --quick            # about 13 minutes here (keyed: ~3)
  bench/run_bench.py                    # the full profile (10M backlog)
  bench/run_bench.py --sections throughput --counts 8 --reps 5
  bench/run_bench.py --sections keyed   # issue 19: ~6 minutes at load 5-7
  bench/run_bench.py --before /tmp/sqlgroup_bench_old  # also runs an older
        harness build's sqlgroup systems in the same run, as *_before
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
ARGS = None
RESULTS = []


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def emit(result):
    RESULTS.append(result)
    print(json.dumps(result), flush=True)
    if ARGS.json:
        with open(ARGS.json, "a") as f:
            f.write(json.dumps(result) + "\n")


def harness(binary, *args, timeout=3600):
    """Runs the harness; returns its JSON lines (and its exit code)."""
    p = subprocess.run([binary, *args, "--dsn=" + ARGS.dsn],
                       capture_output=True, text=True, timeout=timeout)
    lines = [json.loads(l) for l in p.stdout.splitlines()
             if l.startswith("{")]
    if p.returncode not in (0, 3):
        raise RuntimeError("%s %s failed (%d): %s" % (
            binary, " ".join(args), p.returncode, p.stderr[-2000:]))
    return lines, p.returncode


def sql(query):
    return subprocess.run(["psql", ARGS.dsn, "-Atc", query], check=True,
                          capture_output=True, text=True).stdout.strip()


def cli(*args):
    return subprocess.run([ARGS.cli, *args, "--dsn", ARGS.dsn], check=True,
                          capture_output=True, text=True).stdout


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def shown(value, pattern):
    """`pattern % value`, or "-" when there is no value (NaN)."""
    return "-" if value != value else pattern % value


# ---------------------------------------------------------------- throughput

SINGLE = ["sqlgroup", "skiplocked", "limit", "readlimit"]
BATCHED = ["sqlgroup_batch", "skiplocked_batch", "limit_batch",
           "readlimit_batch"]


def run_throughput():
    systems = [s for pair in zip(SINGLE, BATCHED) for s in pair
               if s in ARGS.systems]
    # The older build runs the sqlgroup systems asked for, no others.
    before = [s + "_before" for s in ("sqlgroup", "sqlgroup_batch")
              if ARGS.before and s in ARGS.systems]
    # A system that ran dry starts its later runs with the backlog that
    # sufficed, instead of running dry again.
    backlogs = {}
    for rep in range(ARGS.reps):
        for n in ARGS.counts:
            # Rotate the order each repetition: no system always runs first.
            order = systems + (before if n in ARGS.before_counts else [])
            k = rep % len(order)
            for system in order[k:] + order[:k]:
                binary = ARGS.harness
                real = system
                if system.endswith("_before"):
                    binary, real = ARGS.before, system[:-len("_before")]
                backlog = backlogs.get(real, ARGS.backlog_batch
                                       if "batch" in real else
                                       ARGS.backlog_single)
                for attempt in range(3):
                    lines, code = harness(
                        binary, "throughput", "--system=" + real,
                        "--consumers=%d" % n, "--batch=%d" % ARGS.batch,
                        "--backlog=%d" % backlog,
                        "--warmup=%g" % ARGS.warmup,
                        "--seconds=%g" % ARGS.seconds)
                    if code == 0:
                        backlogs[real] = backlog
                        break
                    backlog *= 2  # it ran dry: more next time
                    log("%s ran out of backlog; retrying with %d" %
                        (system, backlog))
                r = lines[-1]
                r["system"] = system
                r["rep"] = rep
                # Still dry after three tries: recorded, but kept out of
                # the medians (a starved window reads as a slow system).
                r["ran_dry"] = code != 0
                emit(r)


def throughput_table():
    rows = [r for r in RESULTS
            if r["bench"] == "throughput" and not r.get("ran_dry")]
    if not rows:
        return
    by = {}
    for r in rows:
        by.setdefault((r["system"], r["consumers"]), []).append(r)
    counts = sorted({r["consumers"] for r in rows})
    systems = []
    for r in rows:
        if r["system"] not in systems:
            systems.append(r["system"])
    order = [s for s in SINGLE + ["sqlgroup_before"] + BATCHED +
             ["sqlgroup_batch_before"] if s in systems]

    def med(system, n, key="items_per_s"):
        rs = by.get((system, n), [])
        return median([x[key] for x in rs])

    def per_tick(system, n, key):
        rs = by.get((system, n), [])
        return median([x["waits"][key] / max(1, x["waits"]["ticks"])
                       for x in rs])

    print("\n## Throughput: items acknowledged per second (median of %d)\n" %
          ARGS.reps)
    # The machine is shared: a neighbour's load swings from one minute to
    # the next. Systems of one repetition and count run back to back, so
    # the median of their per-repetition ratios is the steadier figure.
    def ratio(system, other, n):
        mine = {x["rep"]: x["items_per_s"] for x in by.get((system, n), [])}
        theirs = {x["rep"]: x["items_per_s"] for x in by.get((other, n), [])}
        return median([mine[r] / theirs[r] for r in mine if r in theirs])

    print("| system | consumers | items/s | vs SKIP LOCKED | vs limit | "
          "vs floor | lock waits / sample | LWLock waits / sample | "
          "WAL bytes / item | CPU µs / item: client, server | machine busy | "
          "top wait |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
          "---: | ---: | --- |")
    for s in order:
        batched = "batch" in s
        base = "skiplocked_batch" if batched else "skiplocked"
        limit = "limit_batch" if batched else "limit"
        floor = "readlimit_batch" if batched else "readlimit"
        for n in counts:
            if (s, n) not in by:
                continue
            v = med(s, n)
            top = {}
            for x in by[(s, n)]:
                for e, c in x["waits"]["top"].items():
                    top[e] = top.get(e, 0) + c
            top_event = max(top, key=top.get) if top else "-"
            wal = median([x["wal_bytes_per_item"] for x in by[(s, n)]
                          if "wal_bytes_per_item" in x])
            def cpu(key):
                return median([x[key] for x in by[(s, n)] if key in x])
            print("| %s | %d | %.0f | %s | %s | %s | %.2f | %.2f | %s | "
                  "%s, %s | %s | %s |"
                  % (s, n, v, shown(ratio(s, base, n), "%.2fx"),
                     shown(100 * ratio(s, limit, n), "%.0f%%"),
                     shown(100 * ratio(s, floor, n), "%.0f%%"),
                     per_tick(s, n, "lock"), per_tick(s, n, "lwlock"),
                     shown(wal, "%.0f"),
                     shown(cpu("client_us_per_item"), "%.1f"),
                     shown(cpu("server_us_per_item"), "%.1f"),
                     shown(100 * cpu("machine_busy"), "%.0f%%"), top_event))
    print("\nvs SKIP LOCKED / vs limit / vs floor: median over the "
          "repetitions of the ratio to the system of the same mode (single "
          "or batched) run right next to it. Lock waits: backends seen waiting on a "
          "heavyweight lock (wait_event_type Lock) per pg_stat_activity "
          "sample, every 20 ms. CPU per item: this harness's process "
          "(client) and the rest of the machine's busy time (server: "
          "PostgreSQL, on an otherwise idle machine), over the window.")


# ---------------------------------------------------------------- claim cost

def run_claim():
    for layout in ARGS.claim_layouts:
        for backlog in ARGS.claim_backlogs:
            lines, _ = harness(ARGS.harness, "claim_cost",
                               "--backlog=%d" % backlog,
                               "--samples=%d" % ARGS.claim_samples,
                               "--layout=" + layout)
            for r in lines:
                r["target_backlog"] = backlog
                emit(r)


def claim_table():
    rows = [r for r in RESULTS if r["bench"] == "claim_cost"]
    if not rows:
        return
    print("\n## Claim cost against backlog (64-item claims)\n")
    print("| ids | waiting items | claims | p50 ms | p99 ms | max ms | "
          "p50 vs smallest | blocks read / claim | WAL bytes / claim |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    base = {}
    for r in rows:
        layout = r.get("layout", "random")
        base.setdefault(layout, r["p50_ms"])
        print("| %s | %d | %d | %.3f | %.3f | %.3f | %.2fx | %s | %s |" % (
            layout, r["backlog"], r["samples"], r["p50_ms"], r["p99_ms"],
            r["max_ms"], r["p50_ms"] / base[layout],
            "%.1f" % r["blocks_read_per_claim"]
            if "blocks_read_per_claim" in r else "-",
            "%.0f" % r["wal_bytes_per_claim"]
            if "wal_bytes_per_claim" in r else "-"))


# ---------------------------------------------------------------- rebalance

# (NOTIFY, assignor, static members): how members learn of a change, who
# gets which parts, and whether a restart keeps its place. Polling only with
# the default assignor: the assignor changes which parts move, not how
# members learn of a change.
REBALANCE_MODES = ((True, "lexical", False), (True, "sticky", False),
                   (True, "lexical", True), (False, "lexical", False))
STATIC_TIMEOUT_S = 10


def run_rebalance():
    logdir = tempfile.mkdtemp(prefix="sqlgroup-bench-rebalance-")
    for notify, assignor, static in REBALANCE_MODES:
        lines, _ = harness(ARGS.harness, "rebalance", "--cli=" + ARGS.cli,
                           "--notify=%s" % ("true" if notify else "false"),
                           "--assignor=" + assignor,
                           "--static_timeout=%g" % (STATIC_TIMEOUT_S
                                                    if static else 0),
                           "--trials=%d" % ARGS.trials,
                           "--members=%d" % ARGS.members,
                           "--ttl=%g" % ARGS.ttl, "--log_dir=" + logdir)
        for r in lines:
            emit(r)


def rebalance_table():
    rows = [r for r in RESULTS if r["bench"] == "rebalance"]
    if not rows:
        return
    print("\n## Rebalance latency (ms from the change; %d members before a "
          "join, 16 parts, TTL %gs; static members: --static_timeout %ds)\n"
          % (ARGS.members, ARGS.ttl, STATIC_TIMEOUT_S))
    print("| change | wakeup | members | trials | owned p50 | owned max | "
          "processing p50 | processing max | longest part pause p50 | "
          "longest part pause max | join: owned from registration p50 | "
          "parts moved / minimum |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
          "| ---: | ---: |")
    for notify, assignor, static in REBALANCE_MODES:
        for change in ("join", "leave", "kill", "restart", "kill_restart"):
            rs = [r for r in rows if r["notify"] == notify and
                  r["change"] == change and
                  r.get("assignor", "lexical") == assignor and
                  r.get("static", False) == static]
            if not rs:
                continue
            reg = [r["owned_from_register_ms"] for r in rs
                   if r["owned_from_register_ms"] >= 0]
            pause = [r["max_pause_ms"] for r in rs if "max_pause_ms" in r]
            print("| %s | %s | %s | %d | %.0f | %.0f | %.0f | %.0f | %s | %s "
                  "| %s | %d / %d |"
                  % (change, "NOTIFY" if notify else "polling",
                     assignor + (", static" if static else ""), len(rs),
                     median([r["owned_ms"] for r in rs]),
                     max(r["owned_ms"] for r in rs),
                     median([r["processing_ms"] for r in rs]),
                     max(r["processing_ms"] for r in rs),
                     "%.0f" % median(pause) if pause else "-",
                     "%.0f" % max(pause) if pause else "-",
                     "%.0f" % median(reg) if reg else "-",
                     sum(r["moved"] for r in rs),
                     sum(r["min_moved"] for r in rs)))


# ---------------------------------------------------------------- footprint

def run_footprint():
    logdir = tempfile.mkdtemp(prefix="sqlgroup-bench-footprint-")
    for parts in (1, 64):
        group = "footprint%d" % parts
        cli("group", "create", group, "--parts", str(parts))
        cli("produce", "--group", group, "--count", str(ARGS.footprint_items))
        logf = open(os.path.join(logdir, group + ".log"), "w")
        p = subprocess.Popen([ARGS.cli, "consume", "--dsn", ARGS.dsn,
                              "--group", group, "--handler", "noop",
                              "--metrics_addr", "", "--log_level", "warn"],
                             stdout=logf, stderr=logf,
                             stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 300
        while int(sql("SELECT count(*) FROM sqlgroup.items WHERE "
                      "group_name = '%s'" % group)) > 0:
            if time.monotonic() > deadline:
                raise RuntimeError("footprint backlog never drained")
            time.sleep(0.2)
        owned = int(sql("SELECT count(*) FROM sqlgroup.session_parts WHERE "
                        "group_name = '%s'" % group))
        time.sleep(2)  # the lag measurement and idle probes run too
        conns = int(sql("SELECT count(*) FROM pg_stat_activity WHERE "
                        "application_name LIKE 'sqlgroup-%'"))
        with open("/proc/%d/status" % p.pid) as f:
            status = dict(l.split(":", 1) for l in f)
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=60)
        logf.close()
        emit({"bench": "footprint", "parts_owned": owned,
              "items": ARGS.footprint_items, "workers": 4,
              "peak_rss_mb": round(int(status["VmHWM"].split()[0]) / 1024, 1),
              "threads": int(status["Threads"]),
              "connections": conns})


def footprint_table():
    rows = [r for r in RESULTS if r["bench"] == "footprint"]
    if not rows:
        return
    print("\n## Footprint of one `sqlgroup consume` (4 workers, noop, %d items "
          "processed)\n" % rows[0]["items"])
    print("| parts owned | peak RSS (MB) | threads | database connections |")
    print("| ---: | ---: | ---: | ---: |")
    for r in rows:
        print("| %d | %.1f | %d | %d |" % (r["parts_owned"], r["peak_rss_mb"],
                                          r["threads"], r["connections"]))


# ---------------------------------------------------------------- keyed

# (items, ordering) of the keyed section, each one group's backlog:
# unkeyed items and items over --keys keys, both under ordering 'key' (the
# default); the same keys under 'none'; a hot key with the other keys.
KEYED_RUNS = [("unkeyed", "key"), ("keys", "key"), ("keys", "none"),
              ("hot", "key")]


def run_keyed():
    # Waiting items (of the other keys, for `hot`) before each run: the
    # default, then twice what a run consumed (so the next one does not run
    # dry), more after a run that did. One backlog per handler for every
    # kind, so the kinds compare on tables of the same size (a hot key's
    # items come on top).
    backlogs = {}
    start = time.monotonic()
    for rep in range(ARGS.keyed_reps):
        for handler in ARGS.keyed_handlers:
            # Rotate the order each repetition: no kind always runs first.
            k = rep % len(KEYED_RUNS)
            for items, ordering in KEYED_RUNS[k:] + KEYED_RUNS[:k]:
                backlog = backlogs.get(handler, ARGS.keyed_backlog_batch
                                       if handler == "batch" else
                                       ARGS.keyed_backlog_item)
                for attempt in range(3):
                    load = os.getloadavg()[0]
                    lines, code = harness(
                        ARGS.harness, "keyed", "--items=" + items,
                        "--ordering=" + ordering, "--handler=" + handler,
                        "--keys=%d" % ARGS.keys,
                        "--hot_share=%g" % ARGS.hot_share,
                        "--consumers=%d" % ARGS.keyed_consumers,
                        "--batch=%d" % ARGS.batch,
                        "--backlog=%d" % backlog,
                        "--warmup=%g" % ARGS.warmup,
                        "--seconds=%g" % ARGS.keyed_seconds)
                    r = lines[-1]
                    used = r["consumed_other"]
                    if code == 0:
                        backlogs[handler] = max(backlogs.get(handler, 0),
                                                backlog, 2 * used)
                        break
                    backlog = max(2 * backlog, 3 * used)
                    log("keyed %s/%s/%s ran out of backlog; retrying with %d"
                        % (items, ordering, handler, backlog))
                r["rep"] = rep
                r["load_avg"] = load
                # Still dry after three tries: kept out of the medians.
                r["ran_dry"] = code != 0
                emit(r)
    log("keyed: %.0f s" % (time.monotonic() - start))


def keyed_table():
    rows = [r for r in RESULTS if r["bench"] == "keyed"
            and not r.get("ran_dry")]
    if not rows:
        return
    by = {}
    for r in rows:
        by.setdefault((r["handler"], r["items_kind"], r["ordering"]),
                      []).append(r)
    reps = len({r["rep"] for r in rows})
    keys = max(r["keys"] for r in rows)
    consumers = rows[0]["consumers"]

    def med(kind, field="items_per_s"):
        return median([x[field] for x in by.get(kind, []) if field in x])

    # Runs of one repetition ran back to back: the median of their
    # per-repetition ratios is steadier than a ratio of medians.
    def ratio(kind, other, field="items_per_s"):
        mine = {x["rep"]: x[field] for x in by.get(kind, [])}
        theirs = {x["rep"]: x["items_per_s"] for x in by.get(other, [])}
        return median([mine[r] / theirs[r] for r in mine
                       if r in theirs and theirs[r] > 0])

    loads = [r["load_avg"] for r in rows if "load_avg" in r]
    print("\n## Keyed items: items acknowledged per second (%d consumers, "
          "%d keys, median of %d%s)\n" % (
              consumers, keys, reps,
              "; load average %.1f-%.1f" % (min(loads), max(loads))
              if loads else ""))
    print("| handler | items | ordering | items/s | vs unkeyed | "
          "vs ordering key | other keys items/s | other keys vs even "
          "spread | hot key items/s | items / handler call | top wait |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
          "| --- |")
    names = {"unkeyed": "unkeyed", "keys": "%d keys" % keys,
             "hot": "hot key %d%% + %d keys" % (
                 100 * max(r["hot_share"] for r in rows), keys - 1)}
    targets = []
    for handler in ("item", "batch"):
        for items, ordering in KEYED_RUNS:
            kind = (handler, items, ordering)
            if kind not in by:
                continue
            unkeyed = (handler, "unkeyed", "key")
            even = (handler, "keys", "key")
            top = {}
            for x in by[kind]:
                for e, c in x["waits"]["top"].items():
                    top[e] = top.get(e, 0) + c
            vs_unkeyed = vs_key = vs_even = float("nan")
            other = hot = "-"
            if items == "keys" and ordering == "key":
                vs_unkeyed = ratio(kind, unkeyed)
                targets.append(("%s handler: %d keys vs unkeyed >= 0.90x" %
                                (handler, keys), vs_unkeyed, 0.9))
            if items == "keys" and ordering == "none":
                vs_key = ratio(kind, even)
            if items == "hot":
                vs_even = ratio(kind, even, "other_per_s")
                other = "%.0f" % med(kind, "other_per_s")
                hot = "%.1f" % med(kind, "hot_per_s")
                targets.append(("%s handler: other keys beside a hot key vs "
                                "an even spread >= 0.80x" % handler,
                                vs_even, 0.8))
            print("| %s | %s | %s | %.0f | %s | %s | %s | %s | %s | %s | %s |"
                  % (handler, names[items], ordering, med(kind),
                     shown(vs_unkeyed, "%.2fx"), shown(vs_key, "%.2fx"),
                     other, shown(vs_even, "%.2fx"), hot,
                     shown(med(kind, "items_per_call"), "%.1f"),
                     max(top, key=top.get) if top else "-"))
    batch = max(r["batch"] for r in rows)
    print("\nItem: one transaction per item (claims of 64)%s. Ratios: "
          "median over the "
          "repetitions of the ratio to the run of the same handler in the "
          "same repetition (vs unkeyed: unkeyed items, ordering 'key'; vs "
          "ordering key: the same keys under 'key'; other keys vs even "
          "spread: items/s of the keys other than the hot one against all "
          "items/s of the even spread over %d keys)." % (
              "; batch: the batch handler, %d items per claim and ack" % batch
              if batch > 1 else "", keys))
    if targets:
        print("\n| target | measured | |")
        print("| --- | ---: | --- |")
        for name, v, goal in targets:
            print("| %s | %s | %s |" % (
                name, shown(v, "%.2fx"),
                "-" if v != v else ("met" if v >= goal else "NOT met")))


# ---------------------------------------------------------------- main

def machine():
    mem = 0
    with open("/proc/meminfo") as f:
        for l in f:
            if l.startswith("MemTotal:"):
                mem = int(l.split()[1]) / 1024 / 1024
    settings = dict(l.split("|") for l in sql(
        "SELECT name, setting FROM pg_settings WHERE name IN ("
        "'server_version', 'fsync', 'synchronous_commit', 'full_page_writes', "
        "'wal_sync_method', 'shared_buffers', 'max_wal_size', "
        "'checkpoint_timeout', 'autovacuum')").splitlines())
    return {"bench": "machine", "cpus": os.cpu_count(),
            "mem_gib": round(mem, 1), "load_avg": os.getloadavg()[0],
            "postgres": settings}


def main():
    global ARGS
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="fewer sizes and repetitions (about 13 minutes here)")
    parser.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    parser.add_argument("--sections",
                        default="throughput,claim,rebalance,footprint,"
                        "keyed")
    parser.add_argument("--counts", help="consumer counts, e.g. 1,2,4,8,16")
    parser.add_argument("--reps", type=int)
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--systems", default=",".join(SINGLE + BATCHED),
                        help="throughput systems to run, e.g. "
                        "sqlgroup_batch,limit_batch")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--backlog_single", type=int, default=80000)
    parser.add_argument("--backlog_batch", type=int, default=1600000)
    parser.add_argument("--claim_backlogs")
    parser.add_argument("--claim_samples", type=int, default=1000)
    parser.add_argument("--claim_layouts", default="producer,interleaved,random",
                        help="id layouts of the claim section: producer "
                        "(the producer's ids, runs of items per part), "
                        "interleaved (every item in a part of its own, "
                        "before session 8), random (random UUIDs)")
    parser.add_argument("--trials", type=int)
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--ttl", type=float, default=3.0)
    parser.add_argument("--footprint_items", type=int, default=20000)
    parser.add_argument("--before", help="an older sqlgroup_bench binary")
    parser.add_argument("--before_counts", default="8",
                        help="consumer counts at which --before runs")
    parser.add_argument("--keys", type=int, default=1000,
                        help="keyed section: keys of the keyed items")
    parser.add_argument("--hot_share", type=float, default=0.5,
                        help="keyed section: the hot key's share of items")
    parser.add_argument("--keyed_consumers", type=int, default=8)
    parser.add_argument("--keyed_handlers", default="item,batch")
    parser.add_argument("--keyed_reps", type=int,
                        help="default: --reps (3; 1 with --quick)")
    parser.add_argument("--keyed_seconds", type=float, default=3)
    parser.add_argument("--keyed_backlog_item", type=int, default=80000)
    parser.add_argument("--keyed_backlog_batch", type=int, default=600000)
    parser.add_argument("--json", help="also append the JSON lines here")
    parser.add_argument("--dsn", help="use this database instead of a "
                        "private one (it must be migrated)")
    parser.add_argument("--report", nargs="+", metavar="JSONL",
                        help="print the tables of earlier runs' JSON lines "
                        "and run nothing")
    ARGS = parser.parse_args()
    quick = ARGS.quick
    ARGS.counts = [int(x) for x in (ARGS.counts or (
        "4,8,16" if quick else "1,2,4,8,16")).split(",")]
    ARGS.before_counts = [int(x) for x in ARGS.before_counts.split(",")]
    ARGS.claim_layouts = ARGS.claim_layouts.split(",")
    ARGS.systems = ARGS.systems.split(",")
    unknown = set(ARGS.systems) - set(SINGLE + BATCHED)
    if unknown:
        parser.error("unknown --systems: %s (known: %s)" % (
            ",".join(sorted(unknown)), ",".join(SINGLE + BATCHED)))
    ARGS.reps = ARGS.reps or (1 if quick else 3)
    ARGS.keyed_reps = ARGS.keyed_reps or ARGS.reps
    ARGS.keyed_handlers = ARGS.keyed_handlers.split(",")
    if set(ARGS.keyed_handlers) - {"item", "batch"}:
        parser.error("--keyed_handlers takes item and/or batch")
    ARGS.seconds = ARGS.seconds or (3 if quick else 5)
    ARGS.trials = ARGS.trials or (2 if quick else 5)
    ARGS.claim_backlogs = [int(x) for x in (ARGS.claim_backlogs or (
        "10000,200000" if quick else "10000,1000000,10000000")).split(",")]
    ARGS.cli = os.path.abspath(os.path.join(ARGS.build, "sqlgroup"))
    ARGS.harness = os.path.abspath(
        os.path.join(ARGS.build, "bench", "sqlgroup_bench"))
    sections = ARGS.sections.split(",")
    if ARGS.report:
        for path in ARGS.report:
            with open(path) as f:
                RESULTS.extend(json.loads(l) for l in f if l.startswith("{"))
        reps = {r.get("rep", 0) for r in RESULTS if r["bench"] == "throughput"}
        ARGS.reps = len(reps) or ARGS.reps
        print_tables()
        return
    pg = None
    try:
        if not ARGS.dsn:
            pg = subprocess.Popen([ARGS.cli, "postgres", "--durable"],
                                  stdout=subprocess.PIPE,
                                  stdin=subprocess.DEVNULL, text=True)
            ARGS.dsn = pg.stdout.readline()[len("dsn: "):].strip()
            cli("migrate")
        harness(ARGS.harness, "setup")
        emit(machine())
        steps = {"throughput": run_throughput, "claim": run_claim,
                 "rebalance": run_rebalance, "footprint": run_footprint,
                 "keyed": run_keyed}
        for s in sections:
            log("== %s" % s)
            steps[s]()
    finally:
        if pg:
            pg.send_signal(signal.SIGTERM)
            pg.wait(timeout=120)
    print_tables()


def print_tables():
    m = next(r for r in RESULTS if r["bench"] == "machine")
    print("\nMachine: %d CPUs, %.1f GiB; PostgreSQL %s (fsync=%s, "
          "synchronous_commit=%s, wal_sync_method=%s, shared_buffers=%s x 8kB)"
          % (m["cpus"], m["mem_gib"], m["postgres"]["server_version"],
             m["postgres"]["fsync"], m["postgres"]["synchronous_commit"],
             m["postgres"]["wal_sync_method"],
             m["postgres"]["shared_buffers"]))
    throughput_table()
    claim_table()
    rebalance_table()
    footprint_table()
    keyed_table()


if __name__ == "__main__":
    main()
