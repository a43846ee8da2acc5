#!/usr/bin/env python3
"""The chaos checker can fail: on a real database, each invariant's check
counts a violation planted for it, and nothing on a clean state.

  tests/chaos/checker_test.py --cli build/sqlgroup
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import checker  # noqa: E402
from pgnode import PgNode, make_root, psql  # noqa: E402

A = "aaaaaaaa-0000-4000-8000-000000000000"
B = "bbbbbbbb-0000-4000-8000-000000000000"
# Part 0 of 2 holds keys below 8000..., part 1 the rest.
LOW = "10000000-0000-4000-8000-000000000000"
HIGH = "f0000000-0000-4000-8000-000000000000"
# A dead-lettered item of key 'k'.
DEAD = "cccccccc-0000-4000-8000-000000000000"

CLEAN = f"""
INSERT INTO sqlgroup.sessions (id, group_name, member_schema) VALUES
  ('{A}', 'chaos', (SELECT max(version) FROM sqlgroup.schema_migrations));
INSERT INTO sqlgroup.session_parts (group_name, part, session_id, epoch,
  parts_of) VALUES ('chaos', 0, '{A}', 1, 2);
INSERT INTO sqlgroup.ownership_log (group_name, part, epoch, session_id,
  acquired_at, released_at, released_by, parts_of) VALUES
  ('chaos', 0, 1, '{A}', now() - interval '1 hour', NULL, NULL, 2),
  ('chaos', 1, 2, '{B}', now() - interval '1 hour', now(), 'reap', 2);
INSERT INTO sqlgroup_demo.produced VALUES ('k', 2);
INSERT INTO sqlgroup_demo.results (item_id, key, session_id, part, epoch,
  acked_at, payload) VALUES
  ('{LOW}', 'k', '{A}', 0, 1, now() - interval '2 minutes', '1 xx'),
  ('{HIGH}', 'k', '{B}', 1, 2, now() - interval '1 minute', '2 xx');
"""


# Key 'k' numbered 1, 2 (dead-lettered, at `died`), 3.
def with_dead_second(died):
    return (f"UPDATE sqlgroup_demo.produced SET n = 3; "
            f"UPDATE sqlgroup_demo.results SET payload = '3 xx' "
            f"WHERE item_id = '{HIGH}'; "
            f"INSERT INTO sqlgroup.dead_items (group_name, id, key, payload, "
            f"enqueued_at, attempts, died_at) VALUES ('chaos', '{DEAD}', 'k', "
            f"'2 xx', now() - interval '1 hour', 5, {died})")


# States that break nothing, beyond the plain one.
CLEAN_TOO = [
    ("clean: part 2 of 4 (the third quarter) taken after part 1 of 2 ended",
     f"INSERT INTO sqlgroup.ownership_log (group_name, part, epoch, "
     f"session_id, acquired_at, released_at, released_by, parts_of) VALUES "
     f"('chaos', 2, 3, '{A}', now() + interval '1 second', "
     f"now() + interval '2 seconds', 'drop', 4)"),
    ("clean: a dead-lettered item releases the next one of its key",
     with_dead_second("now() - interval '90 seconds'")),
    ("clean: results without a numbered payload have no order to check",
     f"UPDATE sqlgroup_demo.results SET payload = NULL "
     f"WHERE item_id = '{LOW}'; UPDATE sqlgroup_demo.results "
     f"SET payload = 'x' WHERE item_id = '{HIGH}'"),
    ("clean: another group that reads the topic acknowledged the same ids",
     "UPDATE sqlgroup_demo.results SET group_name = 'chaos'; "
     "INSERT INTO sqlgroup_demo.results (item_id, key, session_id, part, "
     "epoch, acked_at, payload, group_name) SELECT item_id, key, session_id, "
     "part + 5, epoch + 5, acked_at - interval '1 hour', payload, 'calm' "
     "FROM sqlgroup_demo.results"),
]

# Each: the check it must trip ("a+b": both), and SQL that breaks only
# that invariant.
VIOLATIONS = [
    ("duplicates",
     f"INSERT INTO sqlgroup_demo.results SELECT * FROM sqlgroup_demo.results "
     f"WHERE item_id = '{LOW}'"),
    ("lost", "UPDATE sqlgroup_demo.produced SET n = 3"),
    ("unexplained", "UPDATE sqlgroup_demo.produced SET n = 1"),
    ("acked_and_dead",
     f"UPDATE sqlgroup_demo.produced SET n = 3; "
     f"INSERT INTO sqlgroup.dead_items (group_name, id, key, payload, "
     f"enqueued_at, attempts) VALUES ('chaos', '{LOW}', 'k', '', now(), 5)"),
    ("left_in_queue",
     "INSERT INTO sqlgroup.items (group_name) VALUES ('chaos')"),
    ("overlapping_ownership",
     f"INSERT INTO sqlgroup.ownership_log (group_name, part, epoch, "
     f"session_id, acquired_at, released_at, released_by, parts_of) VALUES "
     f"('chaos', 1, 3, '{A}', now() - interval '2 minutes', now(), 'drop', "
     f"2)"),
    # Part 1 of 4 (the second quarter) lies in part 0 of 2, held by A.
    ("overlapping_ownership",
     f"INSERT INTO sqlgroup.ownership_log (group_name, part, epoch, "
     f"session_id, acquired_at, released_at, released_by, parts_of) VALUES "
     f"('chaos', 1, 3, '{B}', now() - interval '2 minutes', now(), 'drop', "
     f"4)"),
    # The same, still owned now: both the history and the current owners
    # show it.
    ("overlapping_ownership+overlapping_ranges_now",
     f"INSERT INTO sqlgroup.sessions (id, group_name, member_schema) "
     f"VALUES ('{B}', 'chaos', (SELECT max(version) FROM "
     f"sqlgroup.schema_migrations)); INSERT INTO sqlgroup.session_parts (group_name, part, "
     f"session_id, epoch, parts_of) VALUES ('chaos', 1, '{B}', 3, 4); "
     f"INSERT INTO sqlgroup.ownership_log (group_name, part, epoch, "
     f"session_id, acquired_at, parts_of) VALUES ('chaos', 1, 3, '{B}', "
     f"now() - interval '1 minute', 4)"),
    ("ack_outside_ownership",
     f"UPDATE sqlgroup_demo.results SET acked_at = now() + interval '1 hour' "
     f"WHERE item_id = '{HIGH}'"),
    ("open_log_mismatch",
     "UPDATE sqlgroup.ownership_log SET released_at = now(), "
     "released_by = 'drop' WHERE epoch = 1"),
    ("wrong_part",
     f"UPDATE sqlgroup_demo.results SET part = 1, session_id = '{B}', "
     f"epoch = 2 WHERE item_id = '{LOW}'"),
    # Item 2 of 'k' acknowledged before item 1.
    ("key_order",
     f"UPDATE sqlgroup_demo.results SET acked_at = now() - interval "
     f"'3 minutes' WHERE item_id = '{HIGH}'"),
    # Item 3 acknowledged while item 2 still waited for its retries (it was
    # dead-lettered after).
    ("key_order", with_dead_second("now() - interval '30 seconds'")),
]


# The slow handler's logs (tests/support/slow_handler.py), one per member
# process: "a" and "b". Each case: (name, {log: lines}, {log: [(from, to)]}
# when the suite had that member killed or paused, the handler_overlaps it
# must count). X is one item; times are seconds.
def _run(item, pid, attempt, start, end=None, last=None):
    """A delivery's lines: start, "alive" every second up to `last` (default
    `end`), and an end line unless `end` is None (cut off)."""
    lines = [f"start {item} {pid} {attempt} {start}"]
    t = start + 1
    while t <= (last if last is not None else end):
        lines.append(f"alive {item} {pid} {attempt} {t}")
        t += 1
    if end is not None:
        lines.append(f"end {item} {pid} {attempt} {end}")
    return lines


X = "11111111-0000-4000-8000-000000000000"
INF = float("inf")
HANDLER_CASES = [
    ("clean: one after the other in two members",
     {"a": _run(X, 100, 1, 9, 13), "b": _run(X, 200, 2, 13.5, 16)}, {}, 0),
    ("clean: a retry in the same handler process",
     {"a": _run(X, 100, 1, 9, 10) + _run(X, 100, 2, 10, 12)}, {}, 0),
    ("clean: the first member killed at 10, its call ran on to 13",
     {"a": _run(X, 100, 1, 9, 13), "b": _run(X, 200, 2, 12, 16)},
     {"a": [(10, INF)]}, 0),
    ("clean: the first member SIGSTOPped 10..14, its call cut at 13.1",
     {"a": _run(X, 100, 1, 9, None, last=13), "b": _run(X, 200, 2, 12, 16)},
     {"a": [(10, 14)]}, 0),
    ("handler_overlaps: two live members at once",
     {"a": _run(X, 100, 1, 9, 13), "b": _run(X, 200, 2, 12, 16)}, {}, 1),
    ("handler_overlaps: a call cut off runs 0.1 s past its last line",
     {"a": _run(X, 100, 1, 9, None, last=12), "b": _run(X, 200, 2, 12.05,
                                                       16)}, {}, 1),
    ("handler_overlaps: the overlap outlasts the pause (10..12.5)",
     {"a": _run(X, 100, 1, 9, 13), "b": _run(X, 200, 2, 12, 16)},
     {"a": [(10, 12.5)]}, 1),
    ("handler_overlaps: two handler processes of one member",
     {"a": _run(X, 100, 1, 9, 13) + _run(X, 101, 2, 12, 16)}, {}, 1),
]


def check_handler_logs():
    """handler_overlaps on planted handler logs; returns the failed cases."""
    failures = []
    with tempfile.TemporaryDirectory() as d:
        for name, logs, windows, want in HANDLER_CASES:
            paths = {}
            for member, lines in logs.items():
                paths[member] = os.path.join(d, f"{member}.handler.log")
                with open(paths[member], "w") as f:
                    f.write("\n".join(lines) + "\n")
            runs = checker.read_deliveries(list(paths.values()))
            got, _, _ = checker.handler_overlaps(
                runs, {paths[m]: w for m, w in windows.items()})
            print(f"{'ok' if got == want else 'WRONG'}: {name}: {got}")
            if got != want:
                failures.append(name)
    return failures


# The fast profile's acked_unhandled: of four items the producer tallied,
# one acknowledged after its handler returned (HANDLED), one acknowledged
# with only a call cut off (CUT: counted), one still waiting and one
# dead-lettered (neither acknowledged, whatever their logs say).
HANDLED = "22222222-0000-4000-8000-000000000000"
CUT = "33333333-0000-4000-8000-000000000000"
GONE_DEAD = "44444444-0000-4000-8000-000000000000"


def check_acked_unhandled(port, query):
    """acked_unhandled on a planted tally and handler log; returns the
    failed cases."""
    waiting = psql(port, "SELECT sqlgroup.enqueue('chaos', NULL, '')")[0][0]
    psql(port, "DROP TABLE IF EXISTS tally; CREATE TABLE tally (id uuid); "
         f"INSERT INTO tally VALUES ('{HANDLED}'), ('{CUT}'), "
         f"('{GONE_DEAD}'), ('{waiting}'); "
         "INSERT INTO sqlgroup.dead_items (group_name, id, key, payload, "
         f"enqueued_at, attempts, died_at) VALUES ('chaos', '{GONE_DEAD}', "
         "NULL, '', now(), 5, now())")
    failures = []
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "a.handler.log")
        for name, lines, want in [
                ("acked_unhandled: an ack of a call cut off",
                 _run(HANDLED, 100, 1, 9, 9.5) + _run(CUT, 100, 1, 10, None,
                                                      last=10), 1),
                ("clean: the cut call ran again and returned",
                 _run(HANDLED, 100, 1, 9, 9.5) + _run(CUT, 100, 1, 10, None,
                                                      last=10)
                 + _run(CUT, 200, 2, 12, 12.5), 0)]:
            with open(path, "w") as f:
                f.write("\n".join(lines) + "\n")
            got = checker.acked_unhandled(
                query, checker.read_deliveries([path]), "tally")
            print(f"{'ok' if got == want else 'WRONG'}: {name}: {got}")
            if got != want:
                failures.append(name)
    return failures


def check_sql_calls(port, query):
    """sql_call_checks on a planted tally and notes; returns the failed
    cases. Of four items tallied: one acknowledged and noted once (clean),
    one acknowledged and noted twice, one acknowledged and never noted,
    one still waiting yet noted."""
    waiting = psql(port, "SELECT sqlgroup.enqueue('chaos', NULL, '')")[0][0]
    once, twice, never = HANDLED, CUT, GONE_DEAD.replace("4", "5")
    psql(port, "DROP TABLE IF EXISTS tally, noted; "
         "CREATE TABLE tally (id uuid); CREATE TABLE noted (id uuid); "
         f"INSERT INTO tally VALUES ('{once}'), ('{twice}'), ('{never}'), "
         f"('{waiting}'); INSERT INTO noted VALUES ('{once}'), ('{twice}'), "
         f"('{twice}'), ('{waiting}')")
    failures = []
    for name, fix, want in [
            ("noted_twice+acked_unnoted+noted_unacked", "",
             {"noted_twice": 1, "acked_unnoted": 1, "noted_unacked": 1}),
            ("clean: each acknowledged item noted once",
             f"DELETE FROM noted WHERE id IN ('{twice}', '{waiting}'); "
             f"INSERT INTO noted VALUES ('{twice}'), ('{never}'); "
             f"DELETE FROM sqlgroup.items WHERE id = '{waiting}'; "
             f"INSERT INTO noted VALUES ('{waiting}')",
             {"noted_twice": 0, "acked_unnoted": 0, "noted_unacked": 0})]:
        if fix:
            psql(port, fix)
        got = checker.sql_call_checks(query, "tally", "noted")
        print(f"{'ok' if got == want else 'WRONG'}: {name}: {got}")
        if got != want:
            failures.append(name)
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    args = ap.parse_args()
    failures = check_handler_logs()
    root = make_root()
    node = PgNode.primary(root)
    try:
        dsn = f"host=127.0.0.1 port={node.port} dbname=chaos user=postgres"
        for argv in (["migrate"], ["group", "create", "chaos", "--parts", "2"],
                     ["produce", "--group", "chaos", "--count", "0",
                      "--keys", "1"]):
            subprocess.run([args.cli, *argv, "--dsn", dsn], check=True,
                           capture_output=True)

        def query(sql):
            return psql(node.port, sql)

        for name, breaking in [("clean", "")] + CLEAN_TOO + VIOLATIONS:
            psql(node.port, "TRUNCATE sqlgroup.ownership_log, "
                 "sqlgroup.dead_items, sqlgroup.items, sqlgroup_demo.results, "
                 "sqlgroup_demo.produced; DELETE FROM sqlgroup.sessions;"
                 + CLEAN + breaking)
            found = checker.check(query)
            tripped = sorted(k for k, v in found.items() if v != 0)
            want = [] if name.startswith("clean") else name.split("+")
            status = "ok" if tripped == want else "WRONG"
            print(f"{status}: {name}: tripped {tripped}")
            if tripped != want:
                failures.append(name)
        # After every member left, an open take is a violation, a closed
        # one is not (the last case left epoch 1 open).
        for closing, want in (("", 1), ("UPDATE sqlgroup.ownership_log SET "
                                         "released_at = now(), released_by = "
                                         "'leave' WHERE epoch = 1", 0)):
            if closing:
                psql(node.port, closing)
            got = checker.check_after_leave(query)["unclosed_takes"]
            print(f"{'ok' if got == want else 'WRONG'}: unclosed_takes: {got}")
            if got != want:
                failures.append("unclosed_takes")
        failures += check_acked_unhandled(node.port, query)
        failures += check_sql_calls(node.port, query)
    finally:
        node.remove()
        shutil.rmtree(root, ignore_errors=True)
    if failures:
        print(f"checks that did not trip exactly as planted: {failures}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
