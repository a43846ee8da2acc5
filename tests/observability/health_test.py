#!/usr/bin/env python3
"""/healthz and /readyz of `sqlgroup consume` through a member's life, on a
private PostgreSQL 15 (docs/METRICS.md, issue 41):

- while it runs with a session: both 200 "ok";
- while its handler fails every item (the circuit breaker open): /readyz
  503 naming the circuit, /healthz still 200;
- while it drains after SIGTERM: /readyz 503 "stopping", /healthz 200;
- a second process on the same address: exit 1 with a sentence naming it.

Usage: health_test.py --cli build/sqlgroup
"""

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "chaos"))

from pgnode import PgNode, make_root  # noqa: E402


def fail(msg):
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


def get(port, path):
    """(status, body) of GET http://127.0.0.1:port/path."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}",
                                    timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def closed_port():
    """A port of 127.0.0.1 that nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(what, cond, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.05)
    fail(f"timed out waiting for {what}")


class Run:
    def __init__(self, cli):
        self.cli = cli
        self.root = make_root()
        self.pg = PgNode.primary(self.root)
        self.dsn = (f"host=127.0.0.1 port={self.pg.port} dbname=chaos "
                    "user=postgres")
        self.procs = []

    def run(self, *argv):
        r = subprocess.run([self.cli, *argv, "--dsn", self.dsn],
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            fail(f"sqlgroup {' '.join(argv)}: {r.stderr}")

    def consume(self, name, *argv):
        log = os.path.join(self.root, f"{name}.log")
        with open(log, "w") as f:
            p = subprocess.Popen(
                [self.cli, "consume", "--dsn", self.dsn,
                 "--metrics_addr", "127.0.0.1:0", *argv],
                stdout=f, stderr=subprocess.STDOUT)
        self.procs.append(p)

        def port():
            with open(log) as f:
                m = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics",
                              f.read())
            return m and int(m.group(1))
        return p, wait(f"{name}'s metrics address", port), log

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.pg.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    args = ap.parse_args()
    r = Run(os.path.abspath(args.cli))
    try:
        r.run("migrate")
        for group in ("ok", "broken"):
            r.run("group", "create", group, "--parts", "4", "--ttl", "2s",
                  "--heartbeat", "400ms")

        # Running: both probes answer ok.
        p, port, log = r.consume("ok", "--group", "ok", "--handler",
                                 "sleep:3s", "--workers", "1")
        wait("/readyz 200", lambda: get(port, "/readyz") == (200, "ok\n"))
        if get(port, "/healthz") != (200, "ok\n"):
            fail(f"/healthz while running: {get(port, '/healthz')}")
        if "sqlgroup_build_info" not in get(port, "/metrics")[1]:
            fail("/metrics does not serve the registry")
        if get(port, "/nothing")[0] != 404:
            fail("an unknown path should be 404")

        # The same address twice: a sentence naming it, exit 1.
        taken = subprocess.run(
            [r.cli, "consume", "--dsn", r.dsn, "--group", "ok",
             "--metrics_addr", f"127.0.0.1:{port}"],
            capture_output=True, text=True, timeout=60)
        if taken.returncode != 1 or \
                f"cannot listen on 127.0.0.1:{port}" not in taken.stderr:
            fail(f"a taken port: {taken.returncode} {taken.stderr}")

        # What the handler calls is down (nothing listens where it posts):
        # every item fails, the circuit opens and /readyz says so.
        b, bport, _ = r.consume("broken", "--group", "broken", "--handler",
                                f"http://127.0.0.1:{closed_port()}/",
                                # It waits this long for the endpoint
                                # to come back, then fails the item.
                                "--handler_timeout", "200ms",
                                "--backoff_initial", "10ms",
                                "--max_attempts", "1000")
        wait("/readyz 200 of the broken member",
             lambda: get(bport, "/readyz")[0] == 200)
        r.run("produce", "--group", "broken", "--count", "40", "--keys",
              "20")
        code, body = wait("the circuit's /readyz",
                          lambda: (lambda g: g if g[0] == 503 else None)(
                              get(bport, "/readyz")))
        if "circuit is open" not in body:
            fail(f"/readyz with the circuit open: {code} {body!r}")
        if get(bport, "/healthz") != (200, "ok\n"):
            fail("/healthz should stay ok while the circuit is open")

        # Draining after SIGTERM (a 3 s handler call in flight): not ready,
        # still live.
        r.run("produce", "--group", "ok", "--count", "1")
        time.sleep(1.0)  # the call starts
        p.send_signal(signal.SIGTERM)
        code, body = wait("/readyz while stopping",
                          lambda: (lambda g: g if g[0] == 503 else None)(
                              get(port, "/readyz")), timeout=5)
        if "stopping" not in body:
            fail(f"/readyz while stopping: {code} {body!r}")
        if get(port, "/healthz") != (200, "ok\n"):
            fail("/healthz should stay ok while stopping")
        if p.wait(timeout=30) != 0:
            fail(f"the member did not stop cleanly: {open(log).read()}")
        print("PASS", flush=True)
    finally:
        r.close()


if __name__ == "__main__":
    main()
