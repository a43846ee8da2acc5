#!/usr/bin/env python3
"""A fleet that outgrows its database's connections (issue 22).

Scenario `full`: M `sqlgroup consume` processes (one member each, default
settings: --max_connections 3, --workers 4) start against a private
PostgreSQL 15 with max_connections = C (default 60 on 40), connecting as an
ordinary role, so the 3 superuser slots stay free. A backlog of N keyed
items (`produce --keys`) is waiting. Reported: seconds until every item is
acknowledged, whether every item was acknowledged exactly once and in key
order (the `count` handler's tallies), members still running at the end
(none may exit), members joined when the backlog was drained and 15 s
later (idle workers close their connections, and waiting members join),
members that waited for the server, the peak of the server's client
backends, and how many superuser connections made during the run
succeeded.

Scenario `pooled`: M processes (default 200) join one group of P parts,
then drain N keyed items; once straight to a server with room for all of
them (max_connections = 3M + 50), once through a private PgBouncer 1.18 in
transaction mode with a server pool of S (default 20; --pool_mode
transaction, no --listen_dsn: members poll). Reported per run: seconds
until the group converged (every member registered and every part owned by
its lexical target), items/s of the drain, database CPU during the drain
(% of one core: the postmaster and every backend, from /proc) and
PgBouncer's, the CPU of the database and of the fleet while idle, the peak
of server backends, and exactly-once. The member role has
plan_cache_mode = force_generic_plan (docs/POOLERS.md).

Scenario `pooled_auto`: the pooled run with default settings (no
--pool_mode: each member finds the pooler by itself, issue 41). Reported
as `pooled`, plus the log lines per member that mention the pooler.

Prints a table per scenario and one JSON line each.

Usage: bench/connections_bench.py --cli build/sqlgroup
         [--scenario full,pooled,pooled_auto]
         [--members 60] [--max_connections 40] [--pooled_members 200]
         [--pool 20] [--parts 64] [--items 20000]
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "support"))
from members_bench import Cluster, Psql, settled_sql  # noqa: E402
from pgbouncer import PgBouncer  # noqa: E402

ARGS = None
TICK = os.sysconf("SC_CLK_TCK")
MEMBER_PW = "member-pw"


def run(*argv, **kw):
    return subprocess.run([ARGS.cli, *argv], check=True, capture_output=True,
                          text=True, **kw)


def prepare(cluster, parts):
    """Schema, a member role with its grants, the group, and the demo
    tables the `count` handler writes."""
    dsn = cluster.dsn
    run("migrate", "--dsn", dsn)
    db = Psql(dsn)
    db.sql(f"CREATE ROLE member LOGIN PASSWORD '{MEMBER_PW}'")
    # Generic plans behind a transaction pooler too (docs/POOLERS.md).
    db.sql("ALTER ROLE member SET plan_cache_mode = force_generic_plan")
    run("grant", "--dsn", dsn, "--member_role", "member")
    run("group", "create", "g", "--parts", str(parts), "--dsn", dsn)
    # Creates sqlgroup_demo's tables (as their owner); the members write them.
    run("produce", "--group", "g", "--count", "1", "--keys", "1", "--dsn", dsn)
    db.sql("DELETE FROM sqlgroup.items; DELETE FROM sqlgroup_demo.produced")
    db.sql("GRANT USAGE ON SCHEMA sqlgroup_demo TO member; "
           "GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA "
           "sqlgroup_demo TO member")
    return db


def member_dsn(port):
    return (f"host=127.0.0.1 port={port} dbname=postgres user=member "
            f"password={MEMBER_PW}")


class Fleet:
    def __init__(self, workdir):
        self.workdir = workdir
        self.procs = []

    def start(self, n, dsn, extra=(), stagger=0.02):
        for i in range(n):
            log = open(os.path.join(self.workdir, f"m{len(self.procs)}.log"),
                       "w")
            self.procs.append(subprocess.Popen(
                [ARGS.cli, "consume", "--dsn", dsn, "--group", "g",
                 "--handler", "count", "--metrics_addr", "", *extra],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL))
            log.close()
            time.sleep(stagger)

    def alive(self):
        return sum(1 for p in self.procs if p.poll() is None)

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        codes = []
        for p in self.procs:
            try:
                codes.append(p.wait(timeout=120))
            except subprocess.TimeoutExpired:
                p.kill()
                codes.append(-9)
        return codes

    def logs_with(self, text):
        n = 0
        for name in os.listdir(self.workdir):
            with open(os.path.join(self.workdir, name),
                      errors="replace") as f:
                if text in f.read():
                    n += 1
        return n

    def lines_with(self, text):
        n = 0
        for name in os.listdir(self.workdir):
            with open(os.path.join(self.workdir, name),
                      errors="replace") as f:
                n += sum(1 for line in f if text in line)
        return n

    def cpu_ticks(self):
        total = 0
        for p in self.procs:
            try:
                with open(f"/proc/{p.pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])
            except OSError:
                pass
        return total


def produce(dsn, n):
    run("produce", "--group", "g", "--count", str(n), "--keys", "100",
        "--dsn", dsn)


def finish(result, db, fleet):
    """`result` with exactly-once from the tallies and the fleet's clean
    exits on SIGTERM."""
    result.update(check_exactly_once(db, ARGS.items))
    codes = fleet.stop()
    result["clean_exits"] = sum(1 for c in codes if c == 0)
    db.close()
    return result


def check_exactly_once(db, produced):
    """(acknowledged once, in key order, nothing dead) per the tallies."""
    counted = int(db.sql("SELECT coalesce(sum(n), 0) FROM "
                         "sqlgroup_demo.counters") or 0)
    violations = int(db.sql("SELECT coalesce(sum(order_violations), 0) FROM "
                            "sqlgroup_demo.counters") or 0)
    dead = int(db.sql("SELECT count(*) FROM sqlgroup.dead_items"))
    return {"acked": counted, "produced": produced,
            "order_violations": violations, "dead": dead,
            "exactly_once": counted == produced and violations == 0 and
            dead == 0}


class Sampler:
    """Polls the server's client backends (peak) and, as the superuser,
    opens a fresh connection every second (admin_ok / admin_tries)."""

    def __init__(self, cluster, admin_every=1.0):
        self.cluster = cluster
        self.peak = 0
        self.admin_ok = 0
        self.admin_tries = 0
        self.stop_ = False
        self.admin_every = admin_every
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        db = Psql(self.cluster.dsn)
        last_admin = 0
        while not self.stop_:
            n = int(db.sql("SELECT count(*) FROM pg_stat_activity WHERE "
                           "backend_type = 'client backend'") or 0)
            self.peak = max(self.peak, n)
            if time.monotonic() - last_admin >= self.admin_every:
                last_admin = time.monotonic()
                self.admin_tries += 1
                r = subprocess.run(["psql", self.cluster.dsn, "-X", "-At",
                                    "-c", "SELECT 1"], capture_output=True,
                                   text=True)
                self.admin_ok += r.returncode == 0 and r.stdout.strip() == "1"
            time.sleep(0.05)
        db.close()

    def stop(self):
        self.stop_ = True
        self.t.join()


def wait_drained(db, timeout):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if int(db.sql("SELECT count(*) FROM sqlgroup.items")) == 0:
            return time.monotonic() - t0
        time.sleep(0.1)
    return None


def scenario_full():
    cluster = Cluster(ARGS.pg_bin, ARGS.max_connections)
    workdir = tempfile.mkdtemp(prefix="sqlgroup-conn-full-")
    try:
        db = prepare(cluster, ARGS.parts)
        produce(cluster.dsn, ARGS.items)
        fleet = Fleet(workdir)
        sampler = Sampler(cluster)
        t0 = time.monotonic()
        fleet.start(ARGS.members, member_dsn(cluster.port), stagger=0.05)
        drained = wait_drained(db, ARGS.timeout)
        drain_s = None if drained is None else time.monotonic() - t0
        sessions = int(db.sql("SELECT count(*) FROM sqlgroup.sessions"))
        # Idle, workers close their connections (--idle_connection_timeout
        # 10 s) and members that waited join, one connection each.
        time.sleep(15)
        sessions_idle = int(db.sql("SELECT count(*) FROM sqlgroup.sessions"))
        alive = fleet.alive()
        sampler.stop()
        result = {
            "scenario": "full", "members": ARGS.members,
            "max_connections": ARGS.max_connections, "items": ARGS.items,
            "drain_s": drain_s, "alive_at_end": alive,
            "sessions_at_drain": sessions,
            "sessions_15s_idle": sessions_idle,
            "members_that_waited": fleet.logs_with("waiting for the server"),
            "peak_client_backends": sampler.peak,
            "admin_ok": sampler.admin_ok, "admin_tries": sampler.admin_tries,
        }
        return finish(result, db, fleet)
    finally:
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def bouncer_ticks(bouncer):
    """utime+stime of the PgBouncer process (0 without one)."""
    if bouncer is None or bouncer.proc is None:
        return 0
    try:
        with open(f"/proc/{bouncer.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except OSError:
        return 0


def scenario_pooled(pooled, auto=False):
    m = ARGS.pooled_members
    cluster = Cluster(ARGS.pg_bin, 100 if pooled else 3 * m + 50)
    workdir = tempfile.mkdtemp(prefix="sqlgroup-conn-pooled-")
    bouncer = None
    try:
        db = prepare(cluster, ARGS.parts)
        dsn = member_dsn(cluster.port)
        extra = ()
        if pooled:
            bouncer = PgBouncer(cluster.port, "transaction", ARGS.pool,
                                users={"member": MEMBER_PW},
                                max_client_conn=10 * m).start()
            dsn = bouncer.dsn("postgres", "member", MEMBER_PW)
            # auto: default settings, each member finds the pooler.
            extra = () if auto else ("--pool_mode", "transaction")
        fleet = Fleet(workdir)
        sampler = Sampler(cluster, admin_every=3600)
        t0 = time.monotonic()
        fleet.start(m, dsn, extra, stagger=0.05)
        converged = None
        while time.monotonic() - t0 < ARGS.timeout:
            live = int(db.sql("SELECT count(*) FROM sqlgroup.sessions"))
            if live == m and db.sql(settled_sql("g", ARGS.parts, m)) == "t":
                converged = time.monotonic() - t0
                break
            time.sleep(0.5)
        # Idle for a while, then the drain.
        time.sleep(5)
        db_t0, fleet_t0 = cluster.cpu_ticks(), fleet.cpu_ticks()
        idle_window = 10
        time.sleep(idle_window)
        idle_db = (cluster.cpu_ticks() - db_t0) / TICK / idle_window * 100
        idle_fleet = (fleet.cpu_ticks() - fleet_t0) / TICK / idle_window * 100
        produce(cluster.dsn, ARGS.items)
        db_t0, t1 = cluster.cpu_ticks(), time.monotonic()
        bouncer_t0 = bouncer_ticks(bouncer)
        drained = wait_drained(db, ARGS.timeout)
        elapsed = time.monotonic() - t1
        db_cpu = (cluster.cpu_ticks() - db_t0) / TICK / elapsed * 100
        bouncer_cpu = (bouncer_ticks(bouncer) - bouncer_t0) / TICK / \
            elapsed * 100
        sampler.stop()
        result = {
            "scenario": ("pooled_auto" if auto else "pooled") if pooled
            else "direct", "members": m,
            "pooler_lines_per_member": fleet.lines_with("pooler") / m,
            "pool": ARGS.pool if pooled else None, "parts": ARGS.parts,
            "converged_s": converged,
            "items_s": None if drained is None else ARGS.items / drained,
            "drain_db_cpu_pct": db_cpu,
            "drain_pgbouncer_cpu_pct": bouncer_cpu if pooled else None,
            "idle_db_cpu_pct": idle_db,
            "idle_fleet_cpu_pct": idle_fleet,
            "peak_client_backends": sampler.peak,
            "alive_at_end": fleet.alive(),
        }
        return finish(result, db, fleet)
    finally:
        if bouncer:
            bouncer.close()
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def main():
    global ARGS
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cli", required=True)
    p.add_argument("--pg_bin", default=os.environ.get(
        "SQLGROUP_PG_BIN", "/usr/lib/postgresql/15/bin"))
    p.add_argument("--scenario", default="full,pooled")
    p.add_argument("--members", type=int, default=60)
    p.add_argument("--max_connections", type=int, default=40)
    p.add_argument("--pooled_members", type=int, default=200)
    p.add_argument("--pool", type=int, default=20)
    p.add_argument("--parts", type=int, default=64)
    p.add_argument("--items", type=int, default=20000)
    p.add_argument("--timeout", type=float, default=600)
    ARGS = p.parse_args()
    ARGS.cli = os.path.abspath(ARGS.cli)
    runs = {"full": [scenario_full],
            "pooled": [lambda: scenario_pooled(pooled=False),
                       lambda: scenario_pooled(pooled=True)],
            "pooled_auto": [lambda: scenario_pooled(pooled=True, auto=True)]}
    results = []
    for scenario in ARGS.scenario.split(","):
        if scenario not in runs:
            raise SystemExit(f"unknown scenario {scenario}")
        for one in runs[scenario]:
            results.append(one())
            print(json.dumps(results[-1]), flush=True)
    print()
    for r in results:
        print(" ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}"
                       for k, v in r.items()))


if __name__ == "__main__":
    main()
