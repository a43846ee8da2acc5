"""What the test servers (PostgreSQL in tests/chaos/pgnode.py, PgBouncer in
tests/support/pgbouncer.py) share: a free loopback port, and running a
server as the `postgres` user (both refuse root) tied to our life."""

import ctypes
import os
import pwd
import signal
import socket

_PR_SET_PDEATHSIG = 1


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_user():
    """(uid, gid) to run a server as, or None when we are not root."""
    if os.geteuid() != 0:
        return None
    pw = pwd.getpwnam("postgres")
    return pw.pw_uid, pw.pw_gid


def tie_to_parent(sig=signal.SIGKILL):
    """Sends us `sig` when our parent dies."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, sig)


def demote_and_tie(user):
    """A preexec_fn: a session of its own, killed with its parent, run as
    `user` ((uid, gid) or None)."""
    def run():
        os.setsid()
        tie_to_parent()
        if user:
            os.setgid(user[1])
            os.setuid(user[0])
    return run
