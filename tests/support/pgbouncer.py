#!/usr/bin/env python3
"""A private PgBouncer (Debian's pgbouncer, 1.18) in front of a PostgreSQL
on 127.0.0.1: for the integration tests, the chaos suite and the benchmarks.

As a module:

    with PgBouncer(pg_port, mode="transaction", pool_size=20,
                   users={"member": "pw"}) as bouncer:
        dsn = bouncer.dsn("mydb", "member", "pw")
        bouncer.restart()   # as an operator would: clients lose their link

As a program (for tests in C++), it prints `port: N` once PgBouncer
accepts connections, and runs until it is sent SIGTERM or its parent dies:

    pgbouncer.py --pg_port 5432 --mode transaction --pool_size 20 \\
        --user member:pw

PgBouncer refuses to run as root: when we are root it runs as `postgres`.
Clients are let in without a password (auth_type trust); PgBouncer logs in
to PostgreSQL with each user's password from its auth_file (SCRAM works
with plain-text passwords there), so the server's own rules still apply.
"""

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_process import (demote_and_tie, free_port, server_user,  # noqa
                            tie_to_parent)

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
def _quote(s):
    return '"' + s.replace('"', '""') + '"'


class PgBouncer:
    def __init__(self, pg_port, mode="transaction", pool_size=20, users=None,
                 max_client_conn=2000, port=None):
        if mode not in ("session", "transaction"):
            raise ValueError("mode must be session or transaction")
        if not os.access(PGBOUNCER, os.X_OK):
            raise RuntimeError(
                "pgbouncer is not installed: apt-get install pgbouncer "
                "(scripts/setup.sh installs it)")
        self.pg_port = pg_port
        self.mode = mode
        self.pool_size = pool_size
        self.users = {"postgres": ""}
        self.users.update(users or {})
        self.max_client_conn = max_client_conn
        self.port = port or free_port()
        self.proc = None
        self.dir = tempfile.mkdtemp(prefix="sqlgroup-pgbouncer-")
        self._write_config()

    def _write_config(self):
        user = server_user()
        with open(os.path.join(self.dir, "userlist.txt"), "w") as f:
            for name, password in sorted(self.users.items()):
                f.write(f"{_quote(name)} {_quote(password)}\n")
        # The server's pool is per (database, user); max_db_connections
        # bounds the whole database across users, as a small server would.
        ini = f"""[databases]
* = host=127.0.0.1 port={self.pg_port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {self.dir}/userlist.txt
pool_mode = {self.mode}
default_pool_size = {self.pool_size}
max_db_connections = {self.pool_size}
max_client_conn = {self.max_client_conn}
reserve_pool_size = 0
server_reset_query = DISCARD ALL
server_check_delay = 0
server_login_retry = 1
ignore_startup_parameters = extra_float_digits
logfile = {self.dir}/pgbouncer.log
pidfile = {self.dir}/pgbouncer.pid
admin_users = postgres
stats_users = postgres
log_connections = 0
log_disconnections = 0
"""
        with open(os.path.join(self.dir, "pgbouncer.ini"), "w") as f:
            f.write(ini)
        os.chmod(self.dir, 0o755)
        if user:
            for name in os.listdir(self.dir):
                os.chown(os.path.join(self.dir, name), *user)
            os.chown(self.dir, *user)

    def dsn(self, db, user="postgres", password=None):
        # The password is not needed (trust) but harmless: pass it so the
        # same DSN works straight to the server.
        pw = f" password={password}" if password else ""
        return (f"host=127.0.0.1 port={self.port} dbname={db} user={user}"
                f"{pw}")

    def start(self, timeout=20):
        self.proc = subprocess.Popen(
            [PGBOUNCER, os.path.join(self.dir, "pgbouncer.ini")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=demote_and_tie(server_user()))
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"pgbouncer exited with {self.proc.returncode}: "
                    f"{self.log()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), 0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"pgbouncer did not listen on {self.port}: "
                           f"{self.log()[-2000:]}")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # immediate shutdown
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self, down_for=0.0):
        """Stops PgBouncer (every client and server connection is cut) and
        starts it again on the same port after `down_for` seconds."""
        self.stop()
        time.sleep(down_for)
        self.start()

    def log(self):
        try:
            with open(os.path.join(self.dir, "pgbouncer.log")) as f:
                return f.read()
        except OSError:
            return ""

    def close(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pg_port", type=int, required=True)
    p.add_argument("--mode", default="transaction")
    p.add_argument("--pool_size", type=int, default=20)
    p.add_argument("--user", action="append", default=[],
                   help="NAME:PASSWORD of a role clients log in as")
    args = p.parse_args()
    users = dict(u.split(":", 1) for u in args.user)
    tie_to_parent(signal.SIGTERM)
    bouncer = PgBouncer(args.pg_port, args.mode, args.pool_size, users)
    stop, restart = [], []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    # SIGUSR1 restarts PgBouncer on the same port (as an operator would).
    signal.signal(signal.SIGUSR1, lambda *_: restart.append(1))
    try:
        bouncer.start()
        print(f"port: {bouncer.port}", flush=True)
        while not stop:
            time.sleep(0.05)
            if restart:
                restart.clear()
                bouncer.restart()
                print("restarted", flush=True)
            if bouncer.proc.poll() is not None:
                print("pgbouncer exited:", bouncer.log()[-2000:],
                      file=sys.stderr, flush=True)
                return 1
    finally:
        bouncer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
