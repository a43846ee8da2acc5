"""The workload of a chaos run: `sqlgroup consume` members, each reaching
the database through its own stallable proxies, and a producer that keeps
enqueueing and comes back whenever the database drops it.
"""

import os
import signal
import subprocess
import threading

from tcp_proxy import StallableProxy


class Member:
    """One `sqlgroup consume` process under a stable instance name. Its
    connection string lists both database slots (primary first), each
    through a proxy of its own, with target_session_attrs=read-write: the
    failover path users would configure."""

    def __init__(self, cli, name, slots, log_dir, user, handler, workers,
                 fail_rate=0.0, static_timeout=None, log_name=None,
                 extra_args=()):
        self.cli, self.name, self.user = cli, name, user
        # More flags of `consume` (e.g. --pool_mode transaction).
        self.extra_args = list(extra_args)
        self.handler, self.workers = handler, workers
        self.fail_rate = fail_rate
        # A static member (--static_timeout) keeps its place through a
        # restart; None: a dynamic one.
        self.static_timeout = static_timeout
        self.log_path = os.path.join(log_dir, f"{log_name or name}.log")
        self.proxies = [StallableProxy(port) for port in slots]
        self.proc = None

    def dsn(self):
        hosts = ",".join("127.0.0.1" for _ in self.proxies)
        ports = ",".join(str(p.port) for p in self.proxies)
        return (f"host={hosts} port={ports} dbname=chaos user={self.user} "
                "target_session_attrs=read-write connect_timeout=2")

    def start(self):
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [self.cli, "consume", "--dsn", self.dsn(), "--group", "chaos",
             "--handler", self.handler, "--workers", str(self.workers),
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
                      self.static_timeout, log_name, self.extra_args)

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

    def __init__(self, cli, slots, user, rate, keys, log_path):
        self.cli, self.user, self.rate, self.keys = cli, user, rate, keys
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
                    [self.cli, "produce", "--dsn", self.dsn(), "--group",
                     "chaos", "--count", str(count), "--keys",
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
