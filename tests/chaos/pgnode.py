"""A private PostgreSQL 15 server for the chaos suite: a primary, or a
streaming standby built from one, that the suite can restart, kill and
promote.

The postmaster is our child in its own process group, so a kill takes its
backends with it, and it dies with us (parent-death signal). The server
refuses to run as root, so when we are root it runs as the `postgres` user.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "support"))
from server_process import demote_and_tie, free_port, server_user  # noqa: E402

BIN = os.environ.get("SQLGROUP_PG_BIN", "/usr/lib/postgresql/15/bin")
# The server binaries of other majors (scripts/fetch_postgres.sh) come
# without psql; Debian's speaks to every one of them.
PSQL = next((p for p in (os.path.join(BIN, "psql"),
                         "/usr/lib/postgresql/15/bin/psql")
             if os.path.exists(p)), "psql")
def psql(port, sql, db="chaos", timeout=10, check=True):
    """Runs `sql` on 127.0.0.1:port; returns rows as lists of strings.
    With check, a failure raises; failing to connect is retried for a while
    first (a loaded machine can be slow to accept), with check=False it
    returns None at once: a poll tries again anyway."""
    deadline = time.time() + (20 if check else 0)
    while True:
        try:
            r = subprocess.run(
                [PSQL, "-h", "127.0.0.1", "-p",
                 str(port), "-U", "postgres", "-d", db, "-X", "-q", "-A",
                 "-t", "-F", "\t", "-v", "ON_ERROR_STOP=1", "-c", sql],
                capture_output=True, text=True, timeout=timeout,
                env=dict(os.environ, PGCONNECT_TIMEOUT="2"))
        except subprocess.TimeoutExpired:
            if check:
                raise RuntimeError(f"psql on port {port} took over "
                                   f"{timeout} s: {sql[:60]}")
            return None
        if r.returncode == 0:
            return [line.split("\t") for line in r.stdout.splitlines()
                    if line]
        if r.returncode == 2 and time.time() < deadline:
            time.sleep(0.2)  # psql's exit code 2: could not connect
            continue
        if check:
            raise RuntimeError(
                f"psql on port {port} failed: {r.stderr.strip()}")
        return None


def scalar(port, sql, **kw):
    rows = psql(port, sql, **kw)
    return None if not rows else rows[0][0]


class PgNode:
    """One server: `PgNode.primary(root)` or `PgNode.standby_of(p, root)`."""

    def __init__(self, root, name, extra_conf=""):
        self.name = name
        self.extra_conf = extra_conf
        self.dir = os.path.join(root, name)
        self.port = free_port()
        self.proc = None
        self.log = os.path.join(root, f"{name}.log")
        self._user = server_user()

    @classmethod
    def primary(cls, root, name="pg-a", extra_conf=""):
        """`extra_conf`: postgresql.conf lines that override the defaults
        (e.g. "max_connections = 40")."""
        node = cls(root, name, extra_conf)
        node._run([os.path.join(BIN, "initdb"), "-D", node.dir, "-U",
                   "postgres", "--auth=trust", "-E", "UTF8", "--locale=C",
                   "-N"])
        node._write_conf()
        node.start()
        psql(node.port, "CREATE DATABASE chaos", db="postgres")
        return node

    @classmethod
    def standby_of(cls, primary, root, name):
        """A streaming standby of `primary`. It never waits for a
        synchronous standby of its own, so promoting it leaves no commit
        hanging."""
        node = cls(root, name)
        node._run([os.path.join(BIN, "pg_basebackup"), "-h", "127.0.0.1",
                   "-p", str(primary.port), "-U", "postgres", "-D", node.dir,
                   "-R", "-X", "stream", "-c", "fast",
                   f"--label={name}"])
        node._write_conf()
        with open(os.path.join(node.dir, "postgresql.auto.conf"), "a") as f:
            f.write("synchronous_standby_names = ''\n"
                    f"primary_conninfo = 'host=127.0.0.1 port={primary.port} "
                    f"user=postgres application_name={name}'\n")
        node.start()
        return node

    def _run(self, argv):
        r = subprocess.run(argv, capture_output=True, text=True,
                           preexec_fn=demote_and_tie(self._user),
                           cwd="/", timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {r.stderr.strip()}")

    def _write_conf(self):
        with open(os.path.join(self.dir, "postgresql.conf"), "a") as f:
            f.write(
                f"\nport = {self.port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.dir}'\n"
                "max_connections = 200\nwal_level = replica\n"
                "max_wal_senders = 10\nwal_keep_size = '256MB'\n"
                "hot_standby = on\nfsync = on\nsynchronous_commit = on\n"
                "shared_buffers = '64MB'\nlog_min_messages = warning\n"
                # A standby retries its primary every 5 s by default, and a
                # primary with a synchronous standby commits nothing meanwhile.
                "wal_retrieve_retry_interval = '100ms'\n" + self.extra_conf +
                "\n")

    def start(self, timeout=30):
        logf = open(self.log, "a")
        self.proc = subprocess.Popen(
            [os.path.join(BIN, "postgres"), "-D", self.dir], stdout=logf,
            stderr=subprocess.STDOUT, preexec_fn=demote_and_tie(self._user),
            cwd="/")
        logf.close()
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited; see {self.log}")
            if scalar(self.port, "SELECT 1", db="postgres", check=False) == "1":
                return
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} did not accept connections")

    def stop_immediate(self):
        """`pg_ctl stop -m immediate`: no checkpoint, crash recovery next."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None

    def kill(self):
        """kill -9 of the postmaster and every backend: a dead machine."""
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)
        self.proc = None

    def restart_immediate(self):
        self.stop_immediate()
        self.start()

    def promote(self, timeout=30):
        psql(self.port, "SELECT pg_promote(true, 30)", db="postgres",
             timeout=timeout + 5)

    def require_sync_standby(self, on):
        psql(self.port,
             f"ALTER SYSTEM SET synchronous_standby_names = "
             f"'{'*' if on else ''}'", db="postgres")
        psql(self.port, "SELECT pg_reload_conf()", db="postgres")

    def wait_streaming(self, standby, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if scalar(self.port,
                      "SELECT count(*) FROM pg_stat_replication WHERE "
                      f"application_name = '{standby.name}' AND "
                      "state = 'streaming'", db="postgres",
                      check=False) == "1":
                return
            time.sleep(0.1)
        raise RuntimeError(f"{standby.name} never streamed from {self.name}")

    def remove(self):
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def make_root():
    root = tempfile.mkdtemp(prefix="sqlgroup-chaos-")
    user = server_user()
    if user:
        os.chown(root, user[0], user[1])
    return root
