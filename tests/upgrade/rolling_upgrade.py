#!/usr/bin/env python3
"""A rolling upgrade and a rollback, with a binary built from git history
(docs/UPGRADING.md, issue 44).

The old binary is sqlgroup as of OLD_COMMIT (0.13: schema 13, built before
members recorded their versions), checked out from this repository's
history with `git archive` and built without its tests; the new one is
this build's. On a private PostgreSQL 15, with the chaos suite's members
(`consume --handler record`, under a least-privilege role) and producer
(`produce --keys`, each key's items numbered in enqueue order):

 1. the old binary migrates, creates a keyed group, and two old members
    (o0, o1) consume while the old producer enqueues;
 2. a new member (n0) joins on schema 13 and the producer is replaced by
    the new binary's;
 3. the new `migrate` applies schema 14 (which old members can run
    against) and refuses 15, naming o0 and o1 and not n0, which recorded
    its version when told of schema 14;
 4. o1 stops gracefully: `migrate` still refuses, naming o0 only;
 5. `migrate --force` applies 15 and on and fences o0: its session ends
    in the migration's transaction, it exits with the database's sentence,
    and no acknowledgement of it commits after the migration;
 6. rollback: the old binary started against the new schema refuses at once
    and never registers, while the new members go on;
 7. a later contract migration (the next number, accepting members only
    from itself,
    applied from a copy of sql/ with --migrations_dir) is refused naming
    the new members with their release, then forced while they are busy
    with a burst: they stop at once on the newer schema, none of their
    acknowledgements after the fence; the schema is restored and two
    fresh members drain the rest;
 8. the queue drains, the members leave, and the chaos checker's
    invariants hold over the whole run: every item acknowledged exactly
    once, in key order, only by the part's owner.

Usage: rolling_upgrade.py --cli build/sqlgroup --source . --work DIR
(DIR keeps the old binary's build between runs). Needs the git history of
--source (a clone without --depth): it says so and fails otherwise.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "chaos"))

import checker  # noqa: E402
from pgnode import PgNode, make_root, psql  # noqa: E402
from workload import DEMO_ROLES_SQL, Member, Producer  # noqa: E402

# The last commit of 0.13 (schema 13): members that record no version. When
# a release adds the next contract migration, move this to the last commit
# of the release before it.
OLD_COMMIT = "7ef2841c004868a14c671588431b2ed964d42fef"
OLD_SCHEMA = 13
RATE = 150  # items/s
KEYS = 60
BURST = 3000  # enqueued at once before the schema changes under the members
SKIPPED = 77  # ctest's SKIP_RETURN_CODE for this test


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def fail(msg):
    log(f"FAIL: {msg}")
    sys.exit(1)


def build_old(source, work):
    """The old binary, built once into `work` (a stamp names its commit)."""
    out = os.path.join(work, f"old-{OLD_COMMIT[:12]}")
    cli = os.path.join(out, "build", "sqlgroup")
    if os.path.exists(cli):
        return cli
    if subprocess.run(["git", "-C", source, "cat-file", "-e",
                       OLD_COMMIT + "^{commit}"],
                      capture_output=True).returncode != 0:
        shallow = subprocess.run(
            ["git", "-C", source, "rev-parse", "--is-shallow-repository"],
            capture_output=True, text=True).stdout.strip() == "true"
        why = (f"commit {OLD_COMMIT} is not in the git history of {source}: "
               "this test builds the previous release from it. Clone the "
               "repository with its history (no --depth), or fetch it with "
               "`git fetch --unshallow`.")
        if shallow:
            # A shallow clone that could not fetch its history (.ci/run
            # tries): ctest reports the test skipped, with this reason.
            log(f"SKIPPED: {why}")
            sys.exit(SKIPPED)
        fail(why)
    src = os.path.join(out, "src")
    os.makedirs(src, exist_ok=True)
    log(f"building sqlgroup at {OLD_COMMIT[:12]} (once; kept in {out})")
    archive = subprocess.Popen(["git", "-C", source, "archive", OLD_COMMIT],
                               stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", src], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        fail("git archive of the old commit failed")
    build_log = os.path.join(out, "build.log")
    with open(build_log, "w") as f:
        for argv in (["cmake", "-S", src, "-B", os.path.join(out, "build"),
                      "-DCMAKE_BUILD_TYPE=Debug", "-DCMAKE_CXX_FLAGS_DEBUG=-O0",
                      "-DSQLGROUP_BUILD_TESTS=OFF",
                      "-DSQLGROUP_BUILD_BENCH=OFF"],
                     ["cmake", "--build", os.path.join(out, "build"), "-j2",
                      "--target", "sqlgroup_cli"]):
            if subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT
                              ).returncode != 0:
                with open(build_log) as b:
                    print(b.read()[-4000:])
                fail(f"building the old commit failed (log: {build_log})")
    return cli


def run(cli, *argv, check=True):
    r = subprocess.run([cli, *argv], capture_output=True, text=True,
                       timeout=120)
    if check and r.returncode != 0:
        fail(f"{os.path.basename(os.path.dirname(os.path.dirname(cli)))} "
             f"sqlgroup {' '.join(argv)}: {r.stderr}")
    return r


class Upgrade:
    def __init__(self, new_cli, old_cli, source):
        self.new, self.old, self.source = new_cli, old_cli, source
        self.root = make_root()
        self.logs = os.path.join(self.root, "logs")
        os.makedirs(self.logs)
        self.pg = PgNode.primary(self.root)
        self.dsn = (f"host=127.0.0.1 port={self.pg.port} dbname=chaos "
                    "user=postgres")
        self.members = {}

    def query(self, sql):
        return psql(self.pg.port, sql)

    def scalar(self, sql):
        return self.query(sql)[0][0]

    def member(self, cli, name):
        m = Member(cli, name, [self.pg.port], self.logs, "chaos_member",
                   "record", 2)
        m.start()
        self.members[name] = m
        return m

    def producer(self, cli, name):
        p = Producer(cli, [self.pg.port], "chaos_producer", RATE, KEYS,
                     os.path.join(self.logs, f"{name}.log"))
        p.start()
        return p

    def wait(self, what, cond, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if cond():
                return
            time.sleep(0.1)
        fail(f"timed out waiting for {what}")

    def owners(self):
        """instance -> parts owned now."""
        out = {}
        for instance, n in self.query(
                "SELECT s.instance, count(p.part) FROM sqlgroup.sessions s "
                "LEFT JOIN sqlgroup.session_parts p ON p.session_id = s.id "
                "WHERE s.group_name = 'chaos' GROUP BY 1"):
            out[instance] = int(n)
        return out

    def acked(self):
        return int(self.scalar("SELECT count(*) FROM sqlgroup_demo.results"))

    def progress(self, what):
        """Waits until more items are acknowledged than now."""
        before = self.acked()
        self.wait(what, lambda: self.acked() > before + RATE // 2)

    def check_fenced(self, sessions, who):
        """The fence stamped the end of the sessions' takes in the
        migration's transaction, after any acknowledgement of theirs that
        was under way (the deletion of their takes waits for those): none
        is later."""
        ins = ",".join(f"'{s}'" for s in sessions)
        fenced = int(self.scalar(
            "SELECT count(*) FROM sqlgroup.ownership_log WHERE "
            f"released_by = 'fenced' AND session_id::text IN ({ins})"))
        if fenced == 0:
            fail(f"the ownership log shows no take of {who} ended by a fence")
        late = int(self.scalar(
            "SELECT count(*) FROM sqlgroup_demo.results r JOIN "
            "sqlgroup.ownership_log l ON l.session_id = r.session_id AND "
            "l.released_by = 'fenced' WHERE r.acked_at >= l.released_at "
            f"AND r.session_id::text IN ({ins})"))
        if late:
            fail(f"{who} acknowledged {late} items after the fence")

    def future_migrations(self):
        """This release's migrations and the next, a contract one that
        changes nothing but the members it accepts (self.future: its
        number)."""
        out = os.path.join(self.root, "sql-future")
        os.makedirs(out)
        sql = os.path.join(self.source, "sql")
        versions = []
        for name in sorted(os.listdir(sql)):
            if re.match(r"^[0-9]{3}_.*\.sql$", name):
                shutil.copy(os.path.join(sql, name), out)
                versions.append(int(name[:3]))
        self.future = max(versions) + 1
        with open(os.path.join(out, f"{self.future:03d}_future.sql"),
                  "w") as f:
            f.write("-- A test's contract migration.\n"
                    f"-- members-from: {self.future}\nSELECT 1;\n")
        return out

    def member_log(self, name):
        with open(self.members[name].log_path) as f:
            return f.read()

    def setup(self):
        run(self.old, "migrate", "--dsn", self.dsn)
        if int(self.scalar("SELECT max(version) FROM "
                           "sqlgroup.schema_migrations")) != OLD_SCHEMA:
            fail(f"the old binary did not migrate to schema {OLD_SCHEMA}")
        run(self.old, "group", "create", "chaos", "--parts", "8", "--ttl",
            "2s", "--heartbeat", "400ms", "--dsn", self.dsn)
        run(self.old, "produce", "--dsn", self.dsn, "--group", "chaos",
            "--count", "0", "--keys", "1")  # creates sqlgroup_demo
        self.query(DEMO_ROLES_SQL)
        run(self.old, "grant", "--member_role", "chaos_member",
            "--producer_role", "chaos_producer", "--dsn", self.dsn)

    def scenario(self):
        self.setup()
        log("1. old members o0, o1 and the old producer")
        self.member(self.old, "o0")
        self.member(self.old, "o1")
        producer = self.producer(self.old, "producer-old")
        self.wait("o0 and o1 owning every part",
                  lambda: self.owners() == {"o0": 4, "o1": 4})
        self.progress("items acknowledged by the old members")

        log("2. a new member joins on schema 13; the new producer")
        self.member(self.new, "n0")
        self.wait("n0 owning parts", lambda: self.owners().get("n0", 0) > 0)
        if "older than this sqlgroup's" not in self.member_log("n0"):
            fail("n0 did not say it runs against an older schema")
        producer.stop()
        if producer.failures:
            fail(f"{producer.failures} runs of the old producer failed")
        asked = producer.asked
        producer = self.producer(self.new, "producer-new")
        self.progress("items acknowledged with three members")

        log("3. migrate: schema 14 applied, 15 refused, naming o0 and o1")
        r = run(self.new, "migrate", "--dsn", self.dsn, check=False)
        if r.returncode == 0:
            fail(f"migrate went ahead with old members live: {r.stdout}")
        for name in ("o0", "o1"):
            if f"(instance {name})" not in r.stderr:
                fail(f"migrate's refusal does not name {name}: {r.stderr}")
        if "(instance n0)" in r.stderr:
            fail(f"migrate named the new member: {r.stderr}")
        if "015_members_know_versions.sql" not in r.stderr:
            fail(f"the refusal does not name the migration: {r.stderr}")
        if int(self.scalar("SELECT max(version) FROM "
                           "sqlgroup.schema_migrations")) != 14:
            fail("schema 14 was not applied")
        recorded = self.query("SELECT instance, member_version, "
                              "member_schema FROM sqlgroup.sessions "
                              "WHERE member_schema IS NOT NULL")
        if [row[0] for row in recorded] != ["n0"]:
            fail(f"only n0 should have recorded its version: {recorded}")
        log(f"   refused: {r.stderr.splitlines()[0]}")

        log("4. o1 stops: migrate still refuses, naming o0 only")
        if self.members["o1"].stop() != 0:
            fail("o1 did not stop cleanly")
        self.wait("o1's parts moved", lambda: "o1" not in self.owners())
        r = run(self.new, "migrate", "--dsn", self.dsn, check=False)
        if r.returncode == 0 or "(instance o0)" not in r.stderr or \
                "(instance o1)" in r.stderr:
            fail(f"migrate should refuse naming o0 only: {r.stderr}")
        self.progress("items acknowledged while migrate was refused")

        log("5. migrate --force fences o0")
        o0_sessions = [row[0] for row in self.query(
            "SELECT id FROM sqlgroup.sessions WHERE instance = 'o0'")]
        r = run(self.new, "migrate", "--force", "--dsn", self.dsn)
        if "fenced (--force): group chaos" not in r.stdout or \
                "(instance o0)" not in r.stdout:
            fail(f"migrate --force did not report the fenced o0: {r.stdout}")
        run(self.new, "grant", "--member_role", "chaos_member",
            "--producer_role", "chaos_producer", "--dsn", self.dsn)
        try:
            code = self.members["o0"].proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            fail("o0 still runs 20 s after it was fenced")
        if code == 0 or "a release before 0.15" not in self.member_log("o0"):
            fail(f"o0 should exit with the database's sentence (code {code})")
        self.check_fenced(o0_sessions, "o0")
        self.wait("n0 owning every part", lambda: self.owners() == {"n0": 8})
        self.member(self.new, "n1")
        self.wait("n0 and n1 sharing the parts",
                  lambda: self.owners() == {"n0": 4, "n1": 4})
        self.progress("items acknowledged after the upgrade")

        log("6. rollback: the old binary refuses the new schema")
        r0 = self.member(self.old, "r0")
        try:
            code = r0.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            fail("the old binary still runs against the new schema")
        if code == 0 or "newer than this sqlgroup knows" not in \
                self.member_log("r0"):
            fail(f"the old binary should refuse the new schema (code {code})")
        if int(self.scalar("SELECT count(*) FROM sqlgroup.sessions "
                           "WHERE instance = 'r0'")) != 0:
            fail("the old binary registered against the new schema")
        self.progress("items acknowledged after the rollback was refused")

        log("7. a newer contract schema: the running new members stop")
        producer.stop()
        if producer.failures:
            fail(f"{producer.failures} runs of the new producer failed")
        asked += producer.asked
        # A burst, so that the members are busy when the schema changes.
        run(self.new, "produce", "--dsn", self.dsn, "--group", "chaos",
            "--count", str(BURST), "--keys", str(KEYS))
        asked += BURST
        future = self.future_migrations()
        r = run(self.new, "migrate", "--migrations_dir", future, "--dsn",
                self.dsn, check=False)
        for name in ("n0", "n1"):
            if f"(instance {name}), sqlgroup " not in r.stderr:
                fail(f"migrate to {self.future} should name {name} with its "
                     "release: "
                     f"{r.stderr}")
        n_sessions = [row[0] for row in self.query(
            "SELECT id FROM sqlgroup.sessions WHERE instance IN "
            "('n0', 'n1')")]
        run(self.new, "migrate", "--force", "--migrations_dir", future,
            "--dsn", self.dsn)
        for name in ("n0", "n1"):
            try:
                code = self.members[name].proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                fail(f"{name} still runs 20 s after schema {self.future}")
            if code == 0 or ("accepts only members that know schema "
                             f"{self.future}") not in self.member_log(name):
                fail(f"{name} should stop on schema {self.future} "
                     f"(code {code})")
        self.check_fenced(n_sessions, "n0 and n1")
        left = int(self.scalar("SELECT count(*) FROM sqlgroup.items"))
        log(f"   both stopped, {left} items left waiting")
        # Restored (the future file changes nothing but the members it
        # accepts): members of this release drain what is left.
        self.query("DELETE FROM sqlgroup.schema_migrations "
                   f"WHERE version = {self.future}")
        self.member(self.new, "n2")
        self.member(self.new, "n3")

        log("8. drain and check")
        self.wait("the queue drained", lambda: int(self.scalar(
            "SELECT count(*) FROM sqlgroup.items")) == 0, timeout=60)
        for name in ("n2", "n3"):
            if self.members[name].stop() != 0:
                fail(f"{name} did not stop cleanly")
        found = checker.check(self.query)
        found.update(checker.check_after_leave(self.query))
        produced = int(self.scalar(
            "SELECT coalesce(sum(n), 0) FROM sqlgroup_demo.produced"))
        found["producer_mismatch"] = abs(produced - asked)
        acked = self.acked()
        log(f"   produced {produced}, acknowledged {acked}; checks: {found}")
        bad = {k: v for k, v in found.items() if v}
        if bad:
            fail("invariants violated: " + "; ".join(
                f"{k}={v} ({checker.meaning(k)})" for k, v in bad.items()))
        if acked < RATE * 5:
            fail(f"only {acked} items went through")

    def close(self):
        for m in self.members.values():
            m.close()
        self.pg.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    old = build_old(os.path.abspath(args.source), os.path.abspath(args.work))
    version = run(args.cli, "--version").stdout.strip()
    if not re.match(r"sqlgroup \d+\.\d+\.\d+ \(schema \d+", version):
        fail(f"unexpected --version: {version}")
    log(f"new: {version}; old: {OLD_COMMIT[:12]} (schema {OLD_SCHEMA})")
    up = Upgrade(os.path.abspath(args.cli), old, os.path.abspath(args.source))
    try:
        up.scenario()
    finally:
        up.close()
    log("PASS")


if __name__ == "__main__":
    main()
