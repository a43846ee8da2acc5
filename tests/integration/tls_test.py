#!/usr/bin/env python3
"""TLS to PostgreSQL, verified: a private PostgreSQL 15 with a certificate
made for the test (its own CA; the certificate names 127.0.0.1 and
localhost), reached with sslmode=verify-full by the admin commands, a
producer and a member, whose connections the server shows as TLS; and a
wrong CA, a host name the certificate does not name, a missing root
certificate file and a server without TLS each refused at once (no
retries) with a sentence that says what to check, by each of the three.

Usage: tls_test.py --cli build/sqlgroup
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "chaos"))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from pgnode import BIN, PgNode, make_root, scalar  # noqa: E402
from server_process import server_user  # noqa: E402

ARGS = None
REFUSED = "The TLS connection was not accepted"


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True,
                   capture_output=True)


def make_certificates(d):
    """A CA, a server certificate it signed for 127.0.0.1 and localhost,
    and another CA that signed nothing of ours."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=test CA",
            cwd=d)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-keyout", "wrong.key", "-out", "wrong.crt", "-subj",
            "/CN=another CA", cwd=d)
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key",
            "-out", "server.csr", "-subj", "/CN=localhost", cwd=d)
    with open(os.path.join(d, "san.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey",
            "ca.key", "-CAcreateserial", "-out", "server.crt", "-days", "2",
            "-extfile", "san.ext", cwd=d)


class TlsServer(PgNode):
    """A PgNode that serves TLS with the test's certificate."""

    @classmethod
    def start_with(cls, root, certs):
        node = cls(root, "tls")
        node._run([os.path.join(BIN, "initdb"), "-D", node.dir, "-U",
                   "postgres", "--auth=trust", "-E", "UTF8", "--locale=C",
                   "-N"])
        user = server_user()
        for name in ("server.crt", "server.key"):
            path = os.path.join(node.dir, name)
            shutil.copy(os.path.join(certs, name), path)
            if user:
                os.chown(path, *user)
        os.chmod(os.path.join(node.dir, "server.key"), 0o600)
        node.extra_conf = ("ssl = on\nssl_cert_file = 'server.crt'\n"
                           "ssl_key_file = 'server.key'\n")
        node._write_conf()
        node.start()
        return node


class TlsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.certs = tempfile.mkdtemp(prefix="sqlgroup-tls-")
        cls.addClassCleanup(shutil.rmtree, cls.certs, ignore_errors=True)
        make_certificates(cls.certs)
        cls.root = make_root()
        cls.addClassCleanup(shutil.rmtree, cls.root, ignore_errors=True)
        cls.server = TlsServer.start_with(cls.root, cls.certs)
        cls.addClassCleanup(cls.server.kill)
        cls.plain = PgNode.primary(cls.root, "plain")  # no TLS at all
        cls.addClassCleanup(cls.plain.kill)

    def dsn(self, ca="ca.crt", host="127.0.0.1", port=None, mode="verify-full"):
        return (f"host={host} hostaddr=127.0.0.1 "
                f"port={port or self.server.port} user=postgres "
                f"dbname=postgres sslmode={mode} "
                f"sslrootcert={os.path.join(self.certs, ca)}")

    def cli(self, *argv, dsn, timeout=60, check=True):
        r = subprocess.run([ARGS.cli, *argv, "--dsn", dsn],
                           capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            self.fail(f"sqlgroup {' '.join(argv)} failed: {r.stderr}")
        return r

    def test_admin_producer_and_member_over_verified_tls(self):
        dsn = self.dsn()
        self.cli("migrate", dsn=dsn)
        self.cli("group", "create", "tls", "--parts", "4", dsn=dsn)
        self.cli("produce", "--group", "tls", "--generate", "--count", "300",
                 "--keys", "10", dsn=dsn)
        member = subprocess.Popen(
            [ARGS.cli, "consume", "--group", "tls", "--handler", "noop",
             "--metrics_addr", "", "--dsn", dsn],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.time() + 30
            while time.time() < deadline and scalar(
                    self.server.port, "SELECT count(*) FROM sqlgroup.items",
                    db="postgres") != "0":
                time.sleep(0.2)
            left = scalar(self.server.port,
                          "SELECT count(*) FROM sqlgroup.items",
                          db="postgres")
            self.assertEqual(left, "0", "the member did not drain the group")
            # Every connection of the member is TLS, none plain.
            rows = scalar(
                self.server.port,
                "SELECT count(*) FILTER (WHERE s.ssl) || '/' || count(*) "
                "FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) "
                "WHERE a.application_name LIKE 'sqlgroup%'", db="postgres")
            tls, total = (int(x) for x in rows.split("/"))
            self.assertGreater(total, 0)
            self.assertEqual(tls, total, "a member connection without TLS")
        finally:
            member.terminate()
            err = member.communicate(timeout=30)[1]
        self.assertEqual(member.returncode, 0, err)
        described = self.cli("group", "describe", "tls", dsn=dsn).stdout
        self.assertIn("GROUP tls", described)

    def assert_refused_at_once(self, dsn, *also):
        """The admin, a producer and a member each stop within seconds
        (no retry, though consume and produce ride out outages) with the
        sentence and libpq's reason (each of `also`)."""
        for argv in (("group", "list"),
                     ("produce", "--group", "tls", "--generate", "--count",
                      "1"),
                     ("consume", "--group", "tls", "--metrics_addr", "")):
            started = time.time()
            r = self.cli(*argv, dsn=dsn, timeout=30, check=False)
            took = time.time() - started
            self.assertNotEqual(r.returncode, 0, argv)
            self.assertIn(REFUSED, r.stderr, argv)
            for text in also:
                self.assertIn(text, r.stderr, argv)
            self.assertLess(took, 4.0, f"{argv} retried for {took:.1f} s")

    def test_a_wrong_ca_is_refused_with_what_to_check(self):
        self.assert_refused_at_once(self.dsn(ca="wrong.crt"),
                                    "certificate verify failed",
                                    "sslrootcert")

    def test_a_host_the_certificate_does_not_name_is_refused(self):
        self.assert_refused_at_once(self.dsn(host="db.example.invalid"),
                                    "does not match host name")

    def test_a_missing_root_certificate_is_refused(self):
        self.assert_refused_at_once(self.dsn(ca="nowhere.crt"),
                                    "nowhere.crt")

    def test_a_server_without_tls_is_refused_under_require(self):
        self.assert_refused_at_once(
            self.dsn(port=self.plain.port, mode="require"),
            "server does not support SSL")


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--cli", required=True)
    ARGS, rest = parser.parse_known_args()
    ARGS.cli = os.path.abspath(ARGS.cli)
    unittest.main(argv=[sys.argv[0], "-v"] + rest)


if __name__ == "__main__":
    main()
