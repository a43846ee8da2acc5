#!/usr/bin/env python3
"""Roles per group, attempted: two groups (alpha, beta) and, for each, a
member, a producer and an operator role granted that group only
(`sqlgroup grant ... --group G`). Every attempt of the table in
docs/SECURITY.md (between its attempts markers) runs as each role against
its own group and the other, in a transaction rolled back, and must
succeed or be refused exactly as the table says: the test fails if a
grant gives more than the table says, or less. An attempt succeeds when
it raises no error and, for reads and writes of rows, touches at least
one row (row-level security refuses by hiding rows).

Then the refusals a person meets: a member, a producer and an operator of
alpha pointed at beta each stop with a sentence naming the role and the
`sqlgroup grant` command; and a producer and a member of alpha run for
real under their roles (the member leaves at SIGTERM: its own live
session, which only it may end).

Usage: security_test.py --cli build/sqlgroup [--docs docs/SECURITY.md]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time
import unittest

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "chaos"))
from pgnode import PSQL, PgNode, make_root, psql, scalar  # noqa: E402

ARGS = None
GROUPS = ("alpha", "beta")
KINDS = ("member", "producer", "operator")
SECRET = "s3cret"


def ids(g):
    """The fixed ids of the rows seeded in group g."""
    c = g[0]
    return {"live": f"00000000-0000-4000-8000-00000000{c}001",
            "expired": f"00000000-0000-4000-8000-00000000{c}002",
            "static": f"00000000-0000-4000-8000-00000000{c}003",
            "dead": f"00000000-0000-4000-8000-00000000{c}004",
            "item": f"00000000-0000-4000-8000-00000000{c}005"}


# Each attempt: (kind, SQL). "rows": succeeds when it touches or returns a
# row (a count(*) above 0, a command tag's count above 0); "call":
# succeeds when it raises no error. {g}: the group, quoted; {live},
# {expired}, {static}, {dead}, {item}: the ids seeded in it.
ATTEMPTS = {
    "read the group's settings (groups)":
        ("rows", "SELECT count(*) FROM sqlgroup.groups WHERE name = {g}"),
    "change the group's settings":
        ("rows", "UPDATE sqlgroup.groups SET session_ttl = session_ttl "
                 "WHERE name = {g}"),
    "read the sessions":
        ("rows", "SELECT count(*) FROM sqlgroup.sessions "
                 "WHERE group_name = {g}"),
    "register a session":
        ("rows", "INSERT INTO sqlgroup.sessions (group_name, member_schema) "
                 "VALUES ({g}, 19)"),
    "heartbeat a session":
        ("rows", "UPDATE sqlgroup.sessions SET heartbeated_at = "
                 "clock_timestamp() + interval '1 day' WHERE id = '{live}'"),
    "move a live session's heartbeat back, then reap it":
        ("rows", "UPDATE sqlgroup.sessions SET heartbeated_at = '-infinity' "
                 "WHERE id = '{live}'; DELETE FROM sqlgroup.sessions "
                 "WHERE id = '{live}'"),
    "move a live session's heartbeat ahead (its own would not count)":
        ("rows", "UPDATE sqlgroup.sessions SET heartbeated_at = 'infinity' "
                 "WHERE id = '{live}'; SELECT count(*) FROM sqlgroup.sessions "
                 "WHERE id = '{live}' AND heartbeated_at > clock_timestamp() "
                 "+ interval '1 hour'"),
    "end another live session":
        ("rows", "DELETE FROM sqlgroup.sessions WHERE id = '{live}'"),
    "end a live session knowing its secret":
        ("rows", "SELECT set_config('sqlgroup.session_secret', '" + SECRET +
                 "', true); DELETE FROM sqlgroup.sessions "
                 "WHERE id = '{live}'"),
    "reap an expired session":
        ("rows", "DELETE FROM sqlgroup.sessions WHERE id = '{expired}'"),
    "replace a static member's session":
        ("rows", "DELETE FROM sqlgroup.sessions WHERE id = '{static}'"),
    "read the parts' owners (session_parts)":
        ("rows", "SELECT count(*) FROM sqlgroup.session_parts "
                 "WHERE group_name = {g}"),
    "take a part":
        ("rows", "INSERT INTO sqlgroup.session_parts (group_name, part, "
                 "session_id, parts_of) VALUES ({g}, 1, '{live}', 4)"),
    "drop a part":
        ("rows", "DELETE FROM sqlgroup.session_parts "
                 "WHERE group_name = {g} AND part = 0"),
    "read the items":
        ("rows", "SELECT count(*) FROM sqlgroup.items WHERE group_name = {g}"),
    "insert an item":
        ("rows", "INSERT INTO sqlgroup.items (group_name, payload) "
                 "VALUES ({g}, '\\x01')"),
    "insert an item into a group that does not exist (G-gone)":
        ("rows", "INSERT INTO sqlgroup.items (group_name, payload) "
                 "VALUES ({g} || '-gone', '\\x01')"),
    "retry an item (attempts, not_before)":
        ("rows", "UPDATE sqlgroup.items SET attempts = attempts + 1 "
                 "WHERE group_name = {g}"),
    "delete an item":
        ("rows", "DELETE FROM sqlgroup.items WHERE group_name = {g}"),
    "read the dead letters":
        ("rows", "SELECT count(*) FROM sqlgroup.dead_items "
                 "WHERE group_name = {g}"),
    "dead-letter an item that exists":
        ("rows", "INSERT INTO sqlgroup.dead_items (group_name, id, key, "
                 "payload, enqueued_at, attempts) SELECT group_name, id, "
                 "key, payload, enqueued_at, attempts FROM sqlgroup.items "
                 "WHERE group_name = {g} LIMIT 1"),
    "forge a dead letter of no item":
        ("rows", "INSERT INTO sqlgroup.dead_items (group_name, id, payload, "
                 "enqueued_at, attempts) VALUES ({g}, gen_random_uuid(), "
                 "'\\x00', now(), 1)"),
    "rewrite a dead letter":
        ("rows", "UPDATE sqlgroup.dead_items SET last_error = 'forged' "
                 "WHERE id = '{dead}'"),
    "delete a dead letter":
        ("rows", "DELETE FROM sqlgroup.dead_items WHERE group_name = {g}"),
    "read the ownership log":
        ("rows", "SELECT count(*) FROM sqlgroup.ownership_log "
                 "WHERE group_name = {g}"),
    "write the ownership log":
        ("rows", "INSERT INTO sqlgroup.ownership_log (group_name, part, "
                 "epoch, session_id) VALUES ({g}, 1, 99, '{live}')"),
    "read the pauses":
        ("rows", "SELECT count(*) FROM sqlgroup.pauses "
                 "WHERE group_name = {g}"),
    "pause through the table":
        ("rows", "INSERT INTO sqlgroup.pauses (group_name, block) "
                 "VALUES ({g}, '')"),
    "read the idempotency keys (enqueue_keys)":
        ("rows", "SELECT count(*) FROM sqlgroup.enqueue_keys "
                 "WHERE group_name = {g}"),
    "read the schema version (schema_migrations)":
        ("rows", "SELECT count(*) FROM sqlgroup.schema_migrations"),
    "truncate the items":
        ("call", "TRUNCATE sqlgroup.items"),
    "create a table in the schema":
        ("call", "CREATE TABLE sqlgroup.intruder (x int)"),
    "enqueue (sqlgroup.enqueue)":
        ("call", "SELECT sqlgroup.enqueue({g}, NULL, '\\x01'::bytea)"),
    "enqueue many (sqlgroup.enqueue_many)":
        ("call", "SELECT count(*) FROM sqlgroup.enqueue_many({g}, "
                 "ARRAY[NULL]::text[], ARRAY['\\x01'::bytea])"),
    "claim an idempotency key (claim_enqueue_key)":
        ("call", "SELECT sqlgroup.claim_enqueue_key({g}, 'k2', '{{}}')"),
    "forget an idempotency key (forget_enqueue_key)":
        ("call", "SELECT sqlgroup.forget_enqueue_key({g}, 'k1')"),
    "call a helper of the enqueue functions (unkeyed_id)":
        ("call", "SELECT sqlgroup.unkeyed_id(0, 4, 0)"),
    "expire dead letters (dead_expire)":
        ("call", "SELECT sqlgroup.dead_expire({g}, 10)"),
    "list dead letters (dead_list)":
        ("call", "SELECT count(*) FROM sqlgroup.dead_list({g})"),
    "requeue a dead letter (dead_requeue)":
        ("call", "SELECT count(*) FROM sqlgroup.dead_requeue({g}, "
                 "ARRAY['{dead}']::uuid[])"),
    "cancel items (items_cancel)":
        ("call", "SELECT count(*) FROM sqlgroup.items_cancel({g}, "
                 "ARRAY['{item}']::uuid[], dry_run => true)"),
    "pause the group (sqlgroup.pause)":
        ("call", "SELECT sqlgroup.pause({g})"),
    "grant itself groups (grant_groups)":
        ("call", "SELECT sqlgroup.grant_groups('member', current_user, "
                 "'{{*}}')"),
}


def table_of_attempts(path):
    """The table between the attempts markers of docs/SECURITY.md:
    {attempt: [6 bools]} in the order member own, member other, producer
    own, producer other, operator own, operator other."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"<!-- attempts:begin -->(.*?)<!-- attempts:end -->", text,
                  re.S)
    if not m:
        raise AssertionError(f"{path} has no attempts markers")
    table = {}
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 7 or cells[0] in ("attempt", "") or \
                set(cells[0]) <= set("-: "):
            continue
        marks = cells[1:]
        bad = [c for c in marks if c not in ("yes", "no")]
        if bad:
            raise AssertionError(f"{path}: row {cells[0]!r} has {bad}")
        table[cells[0]] = [c == "yes" for c in marks]
    return table


class SecurityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = make_root()
        cls.addClassCleanup(shutil.rmtree, cls.root, ignore_errors=True)
        cls.node = PgNode.primary(cls.root, "security")
        cls.addClassCleanup(cls.node.kill)
        # The schema's owner is an ordinary role, as the docs advise; the
        # superuser only creates the roles.
        sql = ["CREATE ROLE sg_admin LOGIN",
               "GRANT CREATE ON DATABASE chaos TO sg_admin"]
        for g in GROUPS:
            sql += [f"CREATE ROLE {g}_{k} LOGIN" for k in KINDS]
        sql.append("CREATE ROLE fleet_member LOGIN")
        for s in sql:
            psql(cls.node.port, s)
        cls.admin = cls.dsn("sg_admin")
        cls.cli_ok("migrate", dsn=cls.admin)
        for g in GROUPS:
            cls.cli_ok("group", "create", g, "--parts", "4", dsn=cls.admin)
            cls.cli_ok("grant", "--member_role", f"{g}_member",
                       "--operator_role", f"{g}_operator", "--group", g,
                       dsn=cls.admin)
            # A pattern too: G and G-* (none of which exists).
            cls.cli_ok("grant", "--producer_role", f"{g}_producer",
                       "--group", g, "--group", f"{g}-*", dsn=cls.admin)
        cls.fleet_grant = cls.cli_ok("grant", "--member_role", "fleet_member",
                                     dsn=cls.admin).stdout

    @classmethod
    def dsn(cls, role):
        return (f"host=127.0.0.1 port={cls.node.port} dbname=chaos "
                f"user={role}")

    @classmethod
    def cli_ok(cls, *argv, dsn):
        r = subprocess.run([ARGS.cli, *argv, "--dsn", dsn],
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise AssertionError(f"sqlgroup {' '.join(argv)}: {r.stderr}")
        return r

    def as_admin(self, sql):
        return psql(self.node.port, f"SET ROLE sg_admin; {sql}")

    def seed(self):
        """The rows every attempt may touch, in both groups (afresh: an
        attempt that succeeded was rolled back, one refused left them)."""
        stmts = ["DELETE FROM sqlgroup.items", "DELETE FROM sqlgroup.dead_items",
                 "DELETE FROM sqlgroup.sessions", "DELETE FROM sqlgroup.pauses",
                 "DELETE FROM sqlgroup.ownership_log",
                 "DELETE FROM sqlgroup.enqueue_keys"]
        for g in GROUPS:
            i = ids(g)
            stmts += [
                f"INSERT INTO sqlgroup.items (group_name, key, payload) "
                f"SELECT '{g}', NULL, '\\x00' FROM generate_series(1, 3)",
                f"INSERT INTO sqlgroup.items (group_name, id, payload) "
                f"VALUES ('{g}', '{i['item']}', '\\x00')",
                f"INSERT INTO sqlgroup.sessions (id, group_name, "
                f"heartbeated_at, secret_hash, member_schema) VALUES ('{i['live']}', '{g}', "
                f"clock_timestamp() + interval '1 day', "
                f"sha256(convert_to('{SECRET}', 'UTF8')), 19)",
                f"INSERT INTO sqlgroup.sessions (id, group_name, "
                f"heartbeated_at, secret_hash, member_schema) VALUES ('{i['expired']}', "
                f"'{g}', clock_timestamp() - interval '1 day', "
                f"sha256(convert_to('other', 'UTF8')), 19)",
                f"INSERT INTO sqlgroup.sessions (id, group_name, "
                f"heartbeated_at, instance, static_timeout, secret_hash, "
                f"member_schema) "
                f"VALUES ('{i['static']}', '{g}', clock_timestamp() + "
                f"interval '1 day', 'i1', interval '1 min', "
                f"sha256(convert_to('other', 'UTF8')), 19)",
                f"INSERT INTO sqlgroup.session_parts (group_name, part, "
                f"session_id, parts_of) VALUES ('{g}', 0, '{i['live']}', 4)",
                f"INSERT INTO sqlgroup.ownership_log (group_name, part, "
                f"epoch, session_id) VALUES ('{g}', 0, 1, '{i['live']}')",
                f"INSERT INTO sqlgroup.dead_items (group_name, id, key, "
                f"payload, enqueued_at, attempts) VALUES ('{g}', "
                f"'{i['dead']}', 'd', '\\x00', now(), 1)",
                f"INSERT INTO sqlgroup.pauses (group_name, block, key) "
                f"VALUES ('{g}', '00000000-0000-00', 'p')",
                f"INSERT INTO sqlgroup.enqueue_keys (group_name, "
                f"idempotency_key, ids) VALUES ('{g}', 'k1', '{{}}')"]
        self.as_admin("; ".join(stmts))

    def psql_as(self, role, db, *statements):
        """psql as `role`, each statement its own -c, stopping at the first
        error (reported with its SQLSTATE)."""
        argv = [PSQL, "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-v",
                "VERBOSITY=verbose", "-h", "127.0.0.1", "-p",
                str(self.node.port), "-U", role, "-d", db]
        for s in statements:
            argv += ["-c", s]
        return subprocess.run(argv, capture_output=True, text=True,
                              timeout=30)

    def attempt(self, role, group, kind, template):
        """True when `role` may do it in `group` (see the module's doc)."""
        sql = template.format(g=f"'{group}'", **ids(group))
        r = self.psql_as(role, "chaos", "BEGIN", sql, "ROLLBACK")
        if r.returncode != 0:
            # A refusal is insufficient_privilege: a missing privilege, a
            # policy's WITH CHECK, a function's or a trigger's refusal.
            if "ERROR:  42501:" not in r.stderr:
                self.fail(f"{role} on {group}: {sql}: not a refusal: "
                          f"{r.stderr.strip()}")
            return False
        if kind == "call":
            return True
        out = [l for l in r.stdout.splitlines() if l not in ("BEGIN",
                                                             "ROLLBACK", "")]
        last = out[-1].split()[-1]
        return int(last) > 0

    def test_every_attempt_as_the_table_says(self):
        table = table_of_attempts(ARGS.docs)
        self.assertEqual(sorted(table), sorted(ATTEMPTS),
                         "the table in docs/SECURITY.md and the test's "
                         "attempts differ")
        self.seed()
        wrong = []
        for name, (kind, template) in ATTEMPTS.items():
            got = []
            for k in KINDS:
                for group in GROUPS:  # alpha's roles: own, then other
                    got.append(self.attempt(f"alpha_{k}", group, kind,
                                            template))
            if got != table[name]:
                wrong.append(f"{name}: table says {table[name]}, got {got}")
        self.assertEqual(wrong, [], "\n".join(wrong))
        # The same of beta's roles, from the other side (a sample).
        for name in ("read the items", "delete an item",
                     "enqueue (sqlgroup.enqueue)",
                     "list dead letters (dead_list)"):
            kind, template = ATTEMPTS[name]
            row = table[name]
            for k, (own, other) in zip(KINDS, zip(row[::2], row[1::2])):
                self.assertEqual(
                    [self.attempt(f"beta_{k}", "beta", kind, template),
                     self.attempt(f"beta_{k}", "alpha", kind, template)],
                    [own, other], f"beta_{k}: {name}")

    def test_a_grant_without_group_is_every_group(self):
        self.assertIn("every group", self.fleet_grant)
        # A SQLGROUP_GROUP meant for consume does not scope a grant, and an
        # empty --group is refused rather than taken for every group.
        env = dict(os.environ, SQLGROUP_GROUP="alpha")
        r = subprocess.run([ARGS.cli, "grant", "--member_role", "fleet_member",
                            "--dsn", self.admin], capture_output=True,
                           text=True, timeout=60, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("for every group", r.stdout)
        r = subprocess.run([ARGS.cli, "grant", "--member_role", "fleet_member",
                            "--group", "", "--dsn", self.admin],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--group names no group", r.stderr)
        self.seed()
        kind, template = ATTEMPTS["read the items"]
        for g in GROUPS:
            self.assertTrue(self.attempt("fleet_member", g, kind, template))
        rows = self.as_admin(
            "SELECT kind || ':' || group_pattern FROM sqlgroup.group_grants "
            "WHERE role_id = 'fleet_member'::regrole")
        self.assertEqual(rows, [["member:*"]])

    def test_roles_granted_before_keep_every_group(self):
        """A database at schema 18 with a member and a producer granted by
        0.18 (no policies), migrated to 19: both go on in every group,
        until a grant scopes them."""
        psql(self.node.port, "CREATE DATABASE upgrade", db="postgres")
        for role in ("old_member", "old_producer", "old_lister", "inner",
                     "reader"):
            psql(self.node.port, f"CREATE ROLE {role} LOGIN", db="postgres")
        psql(self.node.port, "GRANT old_member TO inner; "
             "GRANT pg_read_all_data TO reader", db="postgres")
        dsn = f"host=127.0.0.1 port={self.node.port} dbname=upgrade " \
              "user=postgres"
        eighteen = os.path.join(self.root, "migrations-18")
        os.makedirs(eighteen)
        for name in os.listdir(ARGS.sql):
            if re.match(r"0(0\d|1[0-8])_.*\.sql$", name):
                shutil.copy(os.path.join(ARGS.sql, name), eighteen)
        self.cli_ok("migrate", "--migrations_dir", eighteen, dsn=dsn)
        for kind, role in (("member", "old_member"),
                           ("producer", "old_producer")):
            with open(os.path.join(ARGS.sql, "grants", f"{kind}.sql")) as f:
                # What 0.18 granted: nothing of schema 20's topics.
                grants = "\n".join(
                    line for line in
                    f.read().split("-- Topics (schema 20)")[0].splitlines()
                    if "grant_groups" not in line and
                    "require_grant" not in line).replace(':"role"', role)
            psql(self.node.port, grants, db="upgrade")
        # One operation only, granted by hand.
        psql(self.node.port, "GRANT USAGE ON SCHEMA sqlgroup TO old_lister; "
             "GRANT EXECUTE ON FUNCTION sqlgroup.dead_list(text, text, text, "
             "timestamptz, integer) TO old_lister", db="upgrade")
        for g in GROUPS:
            self.cli_ok("group", "create", g, dsn=dsn)
        self.cli_ok("migrate", dsn=dsn)

        def run(role, sql):
            r = self.psql_as(role, "upgrade", sql)
            return r.stdout.strip() if r.returncode == 0 else r.stderr
        for g in GROUPS:
            run("old_producer", f"SELECT sqlgroup.enqueue('{g}', NULL, "
                                "'\\x01'::bytea)")
        items = "SELECT count(*) FROM sqlgroup.items WHERE group_name = "
        for g in GROUPS:
            self.assertEqual(run("old_member", f"{items}'{g}'"), "1", g)
            self.assertEqual(run("reader", f"{items}'{g}'"), "1", g)
            self.assertEqual(run("old_lister", "SELECT count(*) FROM "
                                 f"sqlgroup.dead_list('{g}')"), "0", g)
        # Scoping a member of a role that has every group changes nothing:
        # refused, saying why.
        r = subprocess.run([ARGS.cli, "grant", "--member_role", "inner",
                            "--group", "alpha", "--dsn", dsn],
                           capture_output=True, text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("member of role old_member, which has every group",
                      r.stderr)
        self.cli_ok("grant", "--member_role", "old_member", "--group", "alpha",
                    dsn=dsn)
        self.assertEqual(run("old_member", f"{items}'alpha'"), "1")
        self.assertEqual(run("old_member", f"{items}'beta'"), "0")

    def refusal(self, argv, role):
        r = subprocess.run([ARGS.cli, *argv, "--dsn", self.dsn(role)],
                           capture_output=True, text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0, f"{role}: {argv} ran")
        return r.stderr

    def test_refusals_name_the_role_and_the_grant(self):
        err = self.refusal(["consume", "--group", "beta", "--handler", "noop",
                            "--metrics_addr", ""], "alpha_member")
        # The command keeps the groups the role has: a grant replaces them.
        self.assertIn("sqlgroup grant --member_role alpha_member --group "
                      "alpha --group beta", err)
        err = self.refusal(["produce", "--group", "beta", "--generate",
                            "--count", "1"], "alpha_producer")
        self.assertIn(
            "sqlgroup grant --producer_role alpha_producer --group alpha "
            "--group alpha-* --group beta", err)
        for argv in (["dead", "list", "beta"], ["group", "describe", "beta"]):
            err = self.refusal(argv, "alpha_operator")
            self.assertIn(
                "sqlgroup grant --operator_role alpha_operator --group alpha "
                "--group beta", err)

    def test_a_member_whose_grant_is_narrowed_stops_and_says_why(self):
        psql(self.node.port, "CREATE ROLE mover LOGIN")
        self.cli_ok("grant", "--member_role", "mover", "--group", "alpha",
                    dsn=self.admin)
        member = subprocess.Popen(
            [ARGS.cli, "consume", "--group", "alpha", "--handler", "noop",
             "--metrics_addr", "", "--dsn", self.dsn("mover")],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.time() + 30
            while time.time() < deadline and scalar(
                    self.node.port, "SELECT count(*) FROM sqlgroup.sessions s "
                    "JOIN pg_stat_activity a ON a.usename = 'mover' "
                    "WHERE s.group_name = 'alpha'") == "0":
                time.sleep(0.2)
            self.cli_ok("grant", "--member_role", "mover", "--group", "beta",
                        dsn=self.admin)
            err = member.communicate(timeout=60)[1]
        finally:
            if member.poll() is None:
                member.kill()
        self.assertEqual(member.returncode, 1, err)
        self.assertIn("role mover may not act as a member of group alpha", err)
        self.assertIn("sqlgroup grant --member_role mover --group beta "
                      "--group alpha", err)
        # Its session, hidden from it now, waits for a reap: not the
        # other tests' business.
        self.as_admin("DELETE FROM sqlgroup.sessions")

    def test_a_member_and_a_producer_of_their_group(self):
        self.as_admin("DELETE FROM sqlgroup.items; "
                      "DELETE FROM sqlgroup.sessions")
        self.cli_ok("produce", "--group", "alpha", "--generate", "--count",
                    "200", dsn=self.dsn("alpha_producer"))
        self.cli_ok("produce", "--group", "beta", "--generate", "--count",
                    "50", dsn=self.dsn("beta_producer"))
        member = subprocess.Popen(
            [ARGS.cli, "consume", "--group", "alpha", "--handler", "noop",
             "--metrics_addr", "", "--dsn", self.dsn("alpha_member")],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.time() + 60
            count = "SELECT count(*) FROM sqlgroup.items WHERE group_name = "
            while time.time() < deadline and scalar(
                    self.node.port, count + "'alpha'") != "0":
                time.sleep(0.2)
            self.assertEqual(scalar(self.node.port, count + "'alpha'"), "0")
            # The member's session keeps the hash of its secret.
            self.assertEqual(scalar(
                self.node.port, "SELECT count(*) FROM sqlgroup.sessions "
                "WHERE group_name = 'alpha' AND secret_hash IS NOT NULL"), "1")
            self.assertEqual(scalar(self.node.port, count + "'beta'"), "50")
        finally:
            member.terminate()
            err = member.communicate(timeout=60)[1]
        self.assertEqual(member.returncode, 0, err)
        # It ended its own live session: only it knew the secret.
        self.assertEqual(
            scalar(self.node.port, "SELECT count(*) FROM sqlgroup.sessions"),
            "0", err)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--cli", required=True)
    parser.add_argument("--docs", default=os.path.join(
        HERE, "..", "..", "docs", "SECURITY.md"))
    parser.add_argument("--sql", default=os.path.join(HERE, "..", "..", "sql"),
                        help="the migrations and grants (sql/)")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], *rest])
