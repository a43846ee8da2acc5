"""A loopback TCP proxy between one member (or producer) and one database
server that the suite can stall: while stalled it keeps every connection
open but forwards nothing, as a network that silently drops packets would.
Connections made meanwhile are accepted and stall too. Armed with
cut_at_commit(n), it forwards the next n COMMITs to the server and closes
their connections before the answer comes back: the server commits, and
the client cannot know it did.

When the server is down the proxy refuses connections, as the server's own
port would: libpq moves on to the next host of a multi-host connection
string only when connecting fails, not when an accepted connection closes.
"""

import select
import socket
import sys
import threading


class StallableProxy:
    def __init__(self, upstream_port):
        self.upstream_port = upstream_port  # may be changed for new links
        self._stalled = threading.Event()
        self._closing = threading.Event()
        self._commit_cuts = 0  # COMMITs still to cut, under _lock
        self.commits_cut = 0
        self._lock = threading.Lock()
        self._links = []
        self.port = 0
        self._listener = self._listen()
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _listen(self):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(64)
        return s

    def _listen_again(self):
        """Takes the port back after the server's downtime. Something else
        may hold it meanwhile (an outgoing connection's local port, say):
        retry, and say so, rather than let the member's slot die quietly."""
        for attempt in range(300):
            try:
                self._listener = self._listen()
                return True
            except OSError as e:
                if attempt == 0:
                    print(f"proxy {self.port}: cannot listen again ({e}); "
                          "retrying for 30 s", file=sys.stderr, flush=True)
                if self._closing.wait(0.1):
                    return False
        print(f"proxy {self.port}: gave up listening", file=sys.stderr,
              flush=True)
        return False

    def _upstream_up(self):
        try:
            socket.create_connection(("127.0.0.1", self.upstream_port),
                                     timeout=1).close()
            return True
        except OSError:
            return False

    def stall(self):
        self._stalled.set()

    def resume(self):
        self._stalled.clear()

    def cut_at_commit(self, n):
        with self._lock:
            self._commit_cuts = n

    def _take_commit_cut(self, data):
        """True when `data` (client to server) holds a COMMIT to cut."""
        if b"COMMIT" not in data:
            return False
        with self._lock:
            if self._commit_cuts <= 0:
                return False
            self._commit_cuts -= 1
            self.commits_cut += 1
            return True

    def close(self):
        self._closing.set()
        self._listener.close()
        with self._lock:
            for pair in self._links:
                for s in pair:
                    _close(s)

    def _accept(self):
        while not self._closing.is_set():
            if not self._upstream_up():
                # Down: refuse (no listener) until the server is back.
                self._listener.close()
                while not self._closing.wait(0.1) and not self._upstream_up():
                    pass
                if self._closing.is_set():
                    return
                if not self._listen_again():
                    return
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._link, args=(client,),
                             daemon=True).start()

    def _link(self, client):
        try:
            upstream = socket.create_connection(
                ("127.0.0.1", self.upstream_port), timeout=5)
            upstream.settimeout(None)
        except OSError:
            _close(client)  # as a refused connection looks to the member
            return
        pair = (client, upstream)
        with self._lock:
            self._links.append(pair)
        peer = {client: upstream, upstream: client}
        try:
            while not self._closing.is_set():
                if self._stalled.is_set():
                    self._closing.wait(0.05)
                    continue
                ready, _, _ = select.select(pair, [], [], 0.05)
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        return
                    peer[s].sendall(data)
                    if s is client and self._take_commit_cut(data):
                        # The COMMIT is on its way; its answer never
                        # comes back.
                        return
        except OSError:
            return
        finally:
            with self._lock:
                if pair in self._links:
                    self._links.remove(pair)
            _close(client)
            _close(upstream)


def _close(s):
    try:
        s.close()
    except OSError:
        pass
