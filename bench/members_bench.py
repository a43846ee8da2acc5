#!/usr/bin/env python3
"""Many members in one group (issue 7): what idle coordination costs the
database, and how fast a join and a graceful leave converge.

M members (one session each, --workers 1 by default) join one group of P
parts on a private PostgreSQL 15 that this script starts itself (default
durability, max_connections raised to fit every member, pg_stat_statements
preloaded). They run as `sqlgroup consume` processes of --per-process K
members each (default 1: a process per member; K > 1: threads of one
process, heartbeating together on one connection). Once the group has
settled on its lexical target and stayed idle for a while, over N
consecutive windows of W seconds (CPU: the median of the windows; rates:
over all of them):
  db_cpu_pct       CPU of every process of the cluster (postmaster, backends,
                   background workers; utime+stime from /proc, exited
                   children through the postmaster's cutime+cstime), as %
                   of one core
  member_cpu_pct   CPU of all member processes together, % of one core
  xact_s           committed + rolled back transactions/s (pg_stat_database)
  stmt_s           statements/s from pg_stat_statements, BEGIN/COMMIT and
                   SET excluded; also per member
  top statements   by total execution time (pg_stat_statements)
  rss_mb           peak RSS (VmHWM) per member (a process's over K): mean
                   and max
  conns            database connections of the members
Then R times: one member joins (M+1, a process of its own), and one
graceful leave (SIGTERM to a random member, back to M; with K > 1 to the
member that just joined): seconds from the start / the signal until every
part is owned by its lexical target (one SQL query, polled every ~10 ms).
Prints a table and one JSON line per P.

Usage: bench/members_bench.py --cli build/sqlgroup [--members 200]
         [--parts 256,4096] [--workers 1] [--per-process 1]
         [--window 20] [--windows 3]
         [--repeats 5]
         [--ttl 5s] [--heartbeat 1s]
"""
import argparse
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time

ARGS = None
TICK = os.sysconf("SC_CLK_TCK")


class Psql:
    """One long-lived psql session: polling must not pay a fork per query."""

    def __init__(self, dsn):
        self.p = subprocess.Popen(
            ["psql", dsn, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=0"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            bufsize=1)

    def sql(self, query):
        self.p.stdin.write(query.rstrip().rstrip(";") + ";\n\\echo __END__\n")
        self.p.stdin.flush()
        lines = []
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise RuntimeError("psql exited")
            line = line.rstrip("\n")
            if line == "__END__":
                return "\n".join(lines).strip()
            lines.append(line)

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=10)


class Cluster:
    """A throwaway PostgreSQL 15 with the settings this benchmark needs
    (`sqlgroup postgres` fixes max_connections at 300)."""

    def __init__(self, bin_dir, max_connections):
        self.root = tempfile.mkdtemp(prefix="sqlgroup-members-pg-")
        self.data = os.path.join(self.root, "data")
        self.sock = os.path.join(self.root, "socket")
        os.makedirs(self.sock)
        as_user = []
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
            shutil.chown(self.sock, "postgres")
            as_user = ["runuser", "-u", "postgres", "--"]
        subprocess.run(as_user + [os.path.join(bin_dir, "initdb"), "-D",
                                  self.data, "-U", "postgres", "-A", "trust",
                                  "--no-sync"],
                       check=True, capture_output=True)
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        log = open(os.path.join(self.root, "server.log"), "w")
        if as_user:
            shutil.chown(log.name, "postgres")
        settings = ["listen_addresses=127.0.0.1",
                    "max_connections=%d" % max_connections,
                    "shared_preload_libraries=pg_stat_statements",
                    "unix_socket_permissions=0777"]
        cmd = as_user + [os.path.join(bin_dir, "postgres"), "-D", self.data,
                         "-p", str(self.port), "-k", self.sock]
        for setting in settings:
            cmd += ["-c", setting]
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=log,
                                     stdin=subprocess.DEVNULL)
        log.close()
        self.dsn = "host=127.0.0.1 port=%d user=postgres dbname=postgres" % \
            self.port
        deadline = time.monotonic() + 60
        while subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1", "-p",
                              str(self.port), "-U", "postgres"]).returncode != 0:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("postgres did not start; see %s" %
                                   os.path.join(self.root, "server.log"))
            time.sleep(0.1)
        with open(os.path.join(self.data, "postmaster.pid")) as f:
            self.postmaster = int(f.readline())

    def cpu_ticks(self):
        """utime+stime of the postmaster, of its live children, and of its
        exited children (cutime+cstime of the postmaster)."""
        total = 0
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            st = proc_stat(int(pid))
            if st is None:
                continue
            if int(pid) == self.postmaster:
                total += st[11] + st[12] + st[13] + st[14]
            elif st[1] == self.postmaster:
                total += st[11] + st[12]
        return total

    def stop(self):
        try:
            os.kill(self.postmaster, signal.SIGINT)  # fast shutdown
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.root, ignore_errors=True)


def proc_stat(pid):
    """Fields of /proc/PID/stat after the command name, as ints where they
    are (index 0 = state, 1 = ppid, 11 = utime, 12 = stime, 13 = cutime,
    14 = cstime), or None if the process is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()
    return [fields[0]] + [int(x) for x in fields[1:]]


class Fleet:
    def __init__(self, dsn, workdir):
        self.dsn, self.workdir = dsn, workdir
        self.members = {}  # process name -> Popen
        self.size = {}     # process name -> members it runs
        self.serial = 0
        self.restarts = 0

    def start(self, group, members=1):
        """One `sqlgroup consume` process running `members` members (more
        than one share a heartbeat connection)."""
        name = "m%d" % self.serial
        self.serial += 1
        log = open(os.path.join(self.workdir, name + ".log"), "w")
        self.members[name] = subprocess.Popen(
            [ARGS.cli, "consume", "--dsn", self.dsn, "--group", group,
             "--handler", "noop", "--workers", str(ARGS.workers),
             "--members", str(members),
             "--instance", name, "--metrics_addr", "", "--log_level", "warn"],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        self.size[name] = members
        log.close()
        return name

    def stop(self, name):
        p = self.members.pop(name)
        self.size.pop(name)
        p.send_signal(signal.SIGTERM)
        return p

    def stop_all(self):
        procs = [self.stop(n) for n in list(self.members)]
        for p in procs:
            p.wait(timeout=120)

    def cpu_ticks(self):
        total = 0
        for p in self.members.values():
            st = proc_stat(p.pid)
            if st is not None:
                total += st[11] + st[12]
        return total

    def rss_mb(self):
        values = []
        for p in self.members.values():
            with open("/proc/%d/status" % p.pid) as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        values.append(int(line.split()[1]) / 1024)
        return values

    def check_alive(self, restart_group=None):
        """Raises if a member exited; during a rollout (restart_group set)
        restarts it instead: on a loaded machine a member can give up at
        start on its 5 s connect timeout."""
        for name in [n for n, p in self.members.items()
                     if p.poll() is not None]:
            if restart_group is None:
                raise RuntimeError("member %s exited early (log in %s)" %
                                   (name, self.workdir))
            self.members.pop(name)
            self.restarts += 1
            self.start(restart_group, self.size.pop(name))


def settled_sql(group, parts, members):
    """True when exactly `members` sessions are live and every part is owned
    by its lexical target: session i of n owns [i*P/n, (i+1)*P/n)."""
    return (
        "WITH live AS (SELECT s.id, row_number() OVER (ORDER BY s.id) - 1 AS i,"
        " count(*) OVER () AS n FROM sqlgroup.sessions s JOIN sqlgroup.groups g"
        " ON g.name = s.group_name WHERE s.group_name = '{g}' AND"
        " s.heartbeated_at > clock_timestamp() - g.session_ttl) "
        "SELECT (SELECT count(*) FROM live) = {m} AND (SELECT count(*) FROM"
        " sqlgroup.session_parts sp JOIN live l ON l.id = sp.session_id"
        " WHERE sp.group_name = '{g}' AND sp.part >= l.i * {p} / l.n"
        " AND sp.part < (l.i + 1) * {p} / l.n) = {p}").format(
            g=group, p=parts, m=members)


def wait_settled(db, fleet, group, parts, members, timeout=300,
                 rollout=False):
    query = settled_sql(group, parts, members)
    deadline = time.monotonic() + timeout
    polls = 0
    while db.sql(query) != "t":
        if time.monotonic() > deadline:
            raise RuntimeError("group %s never settled on %d members" %
                               (group, members))
        polls += 1
        if polls % 50 == 0:
            fleet.check_alive(group if rollout else None)
        time.sleep(0.01)
    return time.monotonic()


def statements(db):
    rows = db.sql(
        "SELECT calls, total_exec_time, rows, regexp_replace(left(query, 90),"
        " '\\s+', ' ', 'g') FROM pg_stat_statements WHERE dbid = (SELECT oid"
        " FROM pg_database WHERE datname = current_database())"
        " AND query NOT LIKE '%pg_stat_statements%'")
    out = []
    for line in rows.splitlines():
        calls, ms, nrows, query = line.split("|", 3)
        out.append({"calls": int(calls), "ms": float(ms), "rows": int(nrows),
                    "query": query})
    return out


def xacts(db):
    return int(db.sql("SELECT xact_commit + xact_rollback FROM "
                      "pg_stat_database WHERE datname = current_database()"))


def measure(cluster, db, fleet, parts):
    m = ARGS.members
    group = "many_p%d" % parts
    fleet.restarts = 0
    subprocess.run([ARGS.cli, "group", "create", group, "--parts", str(parts),
                    "--ttl", ARGS.ttl, "--heartbeat", ARGS.heartbeat,
                    "--dsn", cluster.dsn],
                   check=True, capture_output=True)
    # Start in waves, as a fleet rolls out: 200 registrations at once would
    # measure a thundering herd, not the steady state.
    k = ARGS.per_process
    started = 0
    while started < m:
        n = min(k, m - started)
        fleet.start(group, n)
        before = started
        started += n
        if started // 25 != before // 25:
            wait_settled(db, fleet, group, parts, started, rollout=True)
    wait_settled(db, fleet, group, parts, m, rollout=True)
    time.sleep(ARGS.settle)
    fleet.check_alive()
    conns = int(db.sql("SELECT count(*) FROM pg_stat_activity WHERE "
                       "application_name IN ('sqlgroup-control', "
                       "'sqlgroup-heartbeat') OR "
                       "application_name LIKE 'sqlgroup-worker-%'"))

    db.sql("SELECT pg_stat_statements_reset()")
    # Consecutive windows, medians reported: one window on a shared machine
    # can be off by a third.
    x0 = xacts(db)
    t0 = time.monotonic()
    db_pcts, mem_pcts = [], []
    for _ in range(ARGS.windows):
        db0, mem0, w0 = cluster.cpu_ticks(), fleet.cpu_ticks(), time.monotonic()
        time.sleep(ARGS.window)
        db1, mem1 = cluster.cpu_ticks(), fleet.cpu_ticks()
        w = time.monotonic() - w0
        db_pcts.append(round(100.0 * (db1 - db0) / TICK / w, 1))
        mem_pcts.append(round(100.0 * (mem1 - mem0) / TICK / w, 1))
    x1 = xacts(db)
    elapsed = time.monotonic() - t0
    stmts = statements(db)
    fleet.check_alive()
    rss = [mb / k for mb in fleet.rss_mb()]  # per member

    counted = [s for s in stmts if s["query"].split(" ")[0].upper() not in
               ("BEGIN", "COMMIT", "ROLLBACK", "SET")]
    stmt_s = sum(s["calls"] for s in counted) / elapsed
    busy = sum(s["ms"] for s in stmts)
    top = sorted(stmts, key=lambda s: -s["ms"])[:6]

    joins, leaves = [], []
    rng = random.Random(7)
    for _ in range(ARGS.repeats):
        start = time.monotonic()
        joined = fleet.start(group)
        joins.append(wait_settled(db, fleet, group, parts, m + 1) - start)
        time.sleep(ARGS.pause)
        # One member leaves: a random one, or with several per process the
        # one that just joined (a process would take all of its own along).
        name = (rng.choice(sorted(fleet.members)) if k == 1 else joined)
        start = time.monotonic()
        p = fleet.stop(name)
        leaves.append(wait_settled(db, fleet, group, parts, m) - start)
        p.wait(timeout=60)
        time.sleep(ARGS.pause)
    fleet.stop_all()

    return {
        "bench": "members", "parts": parts, "members": m,
        "members_per_process": k,
        "ttl": ARGS.ttl, "heartbeat": ARGS.heartbeat,
        "restarted_at_rollout": fleet.restarts,
        "workers": ARGS.workers, "window_s": round(elapsed, 1),
        "db_cpu_pct": statistics.median(db_pcts), "db_cpu_windows": db_pcts,
        "member_cpu_pct": statistics.median(mem_pcts),
        "xact_s": round((x1 - x0) / elapsed, 1),
        "stmt_s": round(stmt_s, 1),
        "stmt_s_per_member": round(stmt_s / m, 2),
        "exec_ms_per_s": round(busy / elapsed, 1),
        "conns_per_member": round(conns / m, 2),
        "rss_mb_mean": round(statistics.mean(rss), 1),
        "rss_mb_max": round(max(rss), 1),
        "join_s_p50": round(statistics.median(joins), 3),
        "join_s_max": round(max(joins), 3),
        "leave_s_p50": round(statistics.median(leaves), 3),
        "leave_s_max": round(max(leaves), 3),
        "top": [{"calls_s": round(s["calls"] / elapsed, 1),
                 "ms_per_s": round(s["ms"] / elapsed, 1),
                 "rows_per_call": round(s["rows"] / max(1, s["calls"]), 1),
                 "query": s["query"]} for s in top],
    }


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--cli", required=True)
    parser.add_argument("--members", type=int, default=200)
    parser.add_argument("--parts", default="256,4096")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--per-process", dest="per_process", type=int,
                        default=1,
                        help="members per `sqlgroup consume` process (more "
                        "than one heartbeat together on one connection)")
    parser.add_argument("--window", type=float, default=20,
                        help="seconds of each idle measurement window")
    parser.add_argument("--windows", type=int, default=3,
                        help="consecutive windows; CPU is their median")
    parser.add_argument("--settle", type=float, default=10,
                        help="seconds idle after settling, before measuring")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--ttl", default="5s", help="the group's session TTL")
    parser.add_argument("--heartbeat", default="1s",
                        help="the group's heartbeat interval")
    parser.add_argument("--pause", type=float, default=2,
                        help="seconds between a join and the next leave")
    parser.add_argument("--pg_bin", default="/usr/lib/postgresql/15/bin")
    ARGS = parser.parse_args()
    ARGS.cli = os.path.abspath(ARGS.cli)
    workdir = tempfile.mkdtemp(prefix="sqlgroup-members-")
    # A control connection and up to `workers` worker connections per
    # member, one more member during a join, and some headroom.
    cluster = Cluster(ARGS.pg_bin, (ARGS.members + 1) * (1 + ARGS.workers) + 50)
    fleet = None
    try:
        subprocess.run([ARGS.cli, "migrate", "--dsn", cluster.dsn], check=True,
                       capture_output=True)
        db = Psql(cluster.dsn)
        db.sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        fleet = Fleet(cluster.dsn, workdir)
        results = []
        for parts in [int(x) for x in ARGS.parts.split(",")]:
            r = measure(cluster, db, fleet, parts)
            results.append(r)
            print(json.dumps(r), flush=True)
        print("\n%5s %7s %8s %8s %7s %7s %9s %8s %6s %11s %11s" % (
            "parts", "members", "db_cpu%", "mem_cpu%", "xact/s", "stmt/s",
            "stmt/s/m", "conns/m", "rss_mb", "join p50/max",
            "leave p50/max"))
        for r in results:
            print("%5d %7d %8.1f %8.1f %7.0f %7.0f %9.2f %8.2f %6.1f %5.2f/%5.2f"
                  " %5.2f/%5.2f" % (
                      r["parts"], r["members"], r["db_cpu_pct"],
                      r["member_cpu_pct"], r["xact_s"], r["stmt_s"],
                      r["stmt_s_per_member"], r["conns_per_member"],
                      r["rss_mb_max"], r["join_s_p50"], r["join_s_max"],
                      r["leave_s_p50"], r["leave_s_max"]))
        for r in results:
            print("\nP=%d: top statements by execution time" % r["parts"])
            for s in r["top"]:
                print("  %7.1f calls/s %7.1f ms/s %7.1f rows  %s" % (
                    s["calls_s"], s["ms_per_s"], s["rows_per_call"],
                    s["query"]))
        db.close()
    finally:
        if fleet is not None:
            for p in fleet.members.values():
                p.kill()
        cluster.stop()
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
