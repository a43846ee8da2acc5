"""The workload of a chaos run: `sqlgroup consume` members, each reaching
the database through its own stallable proxies, and a producer that keeps
enqueueing and comes back whenever the database drops it.
"""

import os
import signal
import subprocess
import threading

from tcp_proxy import StallableProxy

# The roles members and producers run under (least privilege: what
# `sqlgroup grant --member_role chaos_member --producer_role
# chaos_producer` gives, plus the demo handlers' tables, which `sqlgroup
# produce --count 0 --keys 1` creates).
DEMO_ROLES_SQL = (
    "CREATE ROLE chaos_member LOGIN; CREATE ROLE chaos_producer LOGIN;"
    "CREATE ROLE chaos_operator LOGIN;"
    "GRANT USAGE ON SCHEMA sqlgroup_demo TO chaos_member, chaos_producer;"
    "GRANT INSERT ON sqlgroup_demo.results TO chaos_member;"
    "GRANT SELECT, INSERT, UPDATE ON sqlgroup_demo.produced "
    "  TO chaos_producer")


class Member:
    """One `sqlgroup consume` process under a stable instance name. Its
    connection string lists both database slots (primary first), each
    through a proxy of its own, with target_session_attrs=read-write: the
    failover path users would configure."""

    def __init__(self, cli, name, slots, log_dir, user, handler, workers,
                 fail_rate=0.0, static_timeout=None, log_name=None,
                 extra_args=(), group="chaos"):
        self.cli, self.name, self.user = cli, name, user
        self.group = group
        # More flags of `consume` (e.g. --pool_mode transaction).
        self.extra_args = list(extra_args)
        self.handler, self.workers = handler, workers
        self.fail_rate = fail_rate
        # A static member (--static_timeout) keeps its place through a
        # restart; None: a dynamic one.
        self.static_timeout = static_timeout
        self.log_path = os.path.join(log_dir, f"{log_name or name}.log")
        self.log_dir, self.log_name = log_dir, log_name or name
        self.proxies = [StallableProxy(port) for port in slots]
        self.proc = None
        # A handler holding "{log}" (the slow profile's exec handler) logs
        # to a file of each process started, so a handler log names the
        # member process that ran it: `handler_log` is the current one's,
        # `handler_logs` every one's.
        self.handler_log = None
        self.handler_logs = []

    def dsn(self):
        hosts = ",".join("127.0.0.1" for _ in self.proxies)
        ports = ",".join(str(p.port) for p in self.proxies)
        return (f"host={hosts} port={ports} dbname=chaos user={self.user} "
                "target_session_attrs=read-write connect_timeout=2")

    def start(self):
        handler = self.handler
        if "{log}" in handler:
            self.handler_log = os.path.join(
                self.log_dir, f"{self.log_name}.{len(self.handler_logs)}"
                ".handler.log")
            self.handler_logs.append(self.handler_log)
            handler = handler.replace("{log}", self.handler_log)
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [self.cli, "consume", "--dsn", self.dsn(), "--group", self.group,
             "--handler", handler, "--workers", str(self.workers),
             "--fail_rate", str(self.fail_rate),
             "--instance", self.name, "--metrics_addr", ""] +
            (["--static_timeout", self.static_timeout]
             if self.static_timeout else []) + self.extra_args,
            stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def twin(self, log_dir, log_name):
        """A second process under the same instance name, through proxies
        of its own (a misconfigured replica, or a restart while the old
        process still lives)."""
        return Member(self.cli, self.name,
                      [p.upstream_port for p in self.proxies], log_dir,
                      self.user, self.handler, self.workers, self.fail_rate,
                      self.static_timeout, log_name, self.extra_args,
                      self.group)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig):
        if self.alive():
            self.proc.send_signal(sig)

    def stop(self, timeout=30):
        """Graceful: SIGTERM, then the exit code (None if it had to be
        killed)."""
        if not self.alive():
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGCONT)
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None

    def kill(self):
        if self.alive():
            self.proc.kill()
            self.proc.wait()

    def retarget(self, slot, port):
        self.proxies[slot].upstream_port = port

    def close(self):
        self.kill()
        for p in self.proxies:
            p.close()


class Producer:
    """Runs `sqlgroup produce --keys` at `rate` items/s in short runs until
    stopped. Each batch and its per-key tally commit together, so whatever
    the faults, sqlgroup_demo.produced is what was enqueued, and each keyed
    item's payload begins with its number within its key (1, 2, 3, ... in
    enqueue order), which the checker's key_order reads back. Every run
    must ride out the faults (--retry_for) and exit 0; `failures` counts
    those that did not. A run is never cut short: stop() lets the last one
    finish, so `asked` (the items of the runs that exited 0) is exactly
    what the producers were asked to enqueue, and the tally must equal it:
    a batch enqueued twice or lost on a retry shows as a difference."""

    def __init__(self, cli, slots, user, rate, keys, log_path, topic=None):
        self.cli, self.user, self.rate, self.keys = cli, user, rate, keys
        # Where the items go: group chaos, or published to `topic`.
        self.target = ["--topic", topic] if topic else ["--group", "chaos"]
        # Through proxies of its own, as the members: the suite can cut its
        # connections during COMMIT.
        self.proxies = [StallableProxy(port) for port in slots]
        self.log_path = log_path
        self.failures = 0
        self.runs = 0
        self.asked = 0
        self.cut_short = 0  # runs still going after stop()'s wait: killed
        self._stop = threading.Event()
        self._proc = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def dsn(self):
        hosts = ",".join("127.0.0.1" for _ in self.proxies)
        ports = ",".join(str(p.port) for p in self.proxies)
        return (f"host={hosts} port={ports} dbname=chaos user={self.user} "
                "target_session_attrs=read-write connect_timeout=2")

    def retarget(self, slot, port):
        """New connections through database slot `slot` go to `port` (a
        fresh standby built there after a failover), as Member.retarget."""
        self.proxies[slot].upstream_port = port

    def cut_at_commit(self, n):
        for p in self.proxies:
            p.cut_at_commit(n)

    def commits_cut(self):
        return sum(p.commits_cut for p in self.proxies)

    def start(self):
        self._thread.start()

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=120)
        if self._proc and self._proc.poll() is None:
            self.cut_short += 1
            self._proc.terminate()
            self._thread.join(timeout=30)

    def _run(self):
        count = self.rate * 5
        while not self._stop.is_set():
            with open(self.log_path, "a") as log:
                self._proc = subprocess.Popen(
                    [self.cli, "produce", "--dsn", self.dsn(), *self.target,
                     "--count", str(count), "--keys",
                     str(self.keys), "--rate", str(self.rate),
                     "--retry_for", "60s"],
                    stdout=log, stderr=subprocess.STDOUT)
            self.runs += 1
            code = self._proc.wait()
            if code == 0:
                self.asked += count
            elif not self.cut_short:
                self.failures += 1
                self._stop.wait(0.5)


class SlowProducer:
    """The slow profile's producer: every `period` seconds a batch of
    `batch` items whose payloads are seconds for tests/support/
    slow_handler.py to sleep on every attempt (uniform in [lo, hi], 0.1 s
    steps), a share `keyed` of them under keys k0..k7, the rest unkeyed.
    Enqueued with sqlgroup.enqueue_many through psql as the superuser, on
    the multi-host `dsn` (it follows a failover by itself). A batch whose
    call failed is counted in `failures` and not retried: what went in is
    what the handlers' logs show, and invariant 10 needs no tally. With
    `tally`, a table of one uuid column: the statement that enqueues a
    batch also writes its ids there, so the table holds exactly the items
    that went in, whatever became of the call (the fast profile's
    acked_unhandled reads it)."""

    def __init__(self, psql_bin, dsn, rng, batch=2, period=2.0, lo=0.5,
                 hi=10.0, keyed=0.5, tally=None):
        self.psql_bin, self.dsn, self.rng = psql_bin, dsn, rng
        self.batch, self.period, self.lo, self.hi = batch, period, lo, hi
        self.keyed, self.tally = keyed, tally
        self.enqueued = 0
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def payloads(self):
        """One batch: (key or None, seconds as text) pairs."""
        out = []
        for _ in range(self.batch):
            seconds = round(self.rng.uniform(self.lo, self.hi), 1)
            key = (f"k{self.rng.randrange(8)}"
                   if self.rng.random() < self.keyed else None)
            out.append((key, f"{seconds:g}"))
        return out

    def start(self):
        self._thread.start()

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self):
        while not self._stop.wait(self.period):
            batch = self.payloads()
            keys = ",".join("NULL" if k is None else f"'{k}'"
                            for k, _ in batch)
            pays = ",".join(f"'{p}'" for _, p in batch)
            enqueue = (f"sqlgroup.enqueue_many('chaos', ARRAY[{keys}]::text[], "
                       f"ARRAY[{pays}]::bytea[])")
            sql = (f"WITH e AS (INSERT INTO {self.tally} SELECT id FROM "
                   f"{enqueue} AS id RETURNING 1) SELECT count(*) FROM e"
                   if self.tally else f"SELECT count(*) FROM {enqueue}")
            try:
                r = subprocess.run(
                    [self.psql_bin, self.dsn, "-X", "-q", "-A", "-t", "-c",
                     sql], capture_output=True, text=True, timeout=10)
                ok = r.returncode == 0
            except subprocess.TimeoutExpired:
                ok = False
            if ok:
                self.enqueued += int(r.stdout.strip())
            else:
                self.failures += 1
