"""The invariants of design.md, checked from the final database state:
the `record` handler's result rows (no unique constraint, so a double
acknowledgement shows; each with the item's payload, whose leading number
is the item's place in its key, see src/cli/numbered_items.h), the
producers' per-key tally, the dead letters and the ownership log that
members write in the transactions that change session_parts; and, for the
slow profile's exec handler, invariant 10 from the handlers' own logs
(handler_overlaps).
"""

# The number a payload (bytea) begins with, or NULL: `produce --keys`
# numbers each key's items 1, 2, 3, ... in enqueue order.
_SEQ = "substring(encode({}, 'escape') FROM '^[0-9]+')::numeric"

# Part {x}.part of {x}.parts_of and part {y}.part of {y}.parts_of share a key.
_OVERLAP = ("{x}.part * {y}.parts_of < ({y}.part + 1) * {x}.parts_of "
            "AND {y}.part * {x}.parts_of < ({x}.part + 1) * {y}.parts_of")

# Current takes of overlapping ranges: impossible while the database
# refuses them; chaos.py samples it while faults and part-count changes run.
OVERLAPPING_NOW = (
    "SELECT count(*) FROM sqlgroup.session_parts x "
    "JOIN sqlgroup.session_parts y ON x.group_name = y.group_name "
    "AND x.epoch < y.epoch AND " + _OVERLAP.format(x="x", y="y") +
    " WHERE x.group_name = 'chaos'")

# Each check: (name, SQL returning one count of violations, what it means).
CHECKS = [
    ("duplicates",
     "SELECT count(*) FROM (SELECT item_id FROM sqlgroup_demo.results "
     "GROUP BY item_id HAVING count(*) > 1) d",
     "items acknowledged more than once"),
    ("lost",
     "SELECT coalesce(sum(greatest(p.n - coalesce(r.n, 0) - coalesce(d.n, 0), "
     "0)), 0) FROM sqlgroup_demo.produced p "
     "LEFT JOIN (SELECT key, count(DISTINCT item_id) AS n "
     "  FROM sqlgroup_demo.results GROUP BY key) r USING (key) "
     "LEFT JOIN (SELECT key, count(*) AS n FROM sqlgroup.dead_items "
     "  WHERE group_name = 'chaos' GROUP BY key) d USING (key)",
     "items produced but neither acknowledged nor dead-lettered"),
    ("unexplained",
     "SELECT coalesce(sum(greatest(coalesce(r.n, 0) + coalesce(d.n, 0) - "
     "coalesce(p.n, 0), 0)), 0) FROM (SELECT key, count(DISTINCT item_id) "
     "  AS n FROM sqlgroup_demo.results GROUP BY key) r "
     "FULL JOIN (SELECT key, count(*) AS n FROM sqlgroup.dead_items "
     "  WHERE group_name = 'chaos' GROUP BY key) d USING (key) "
     "LEFT JOIN sqlgroup_demo.produced p USING (key)",
     "items handled that no committed produce enqueued"),
    ("acked_and_dead",
     "SELECT count(*) FROM sqlgroup_demo.results r JOIN sqlgroup.dead_items d "
     "ON d.group_name = 'chaos' AND d.id = r.item_id",
     "items both acknowledged and dead-lettered"),
    ("left_in_queue",
     "SELECT count(*) FROM sqlgroup.items WHERE group_name = 'chaos'",
     "items still waiting after the drain"),
    # Takes of any part counts (the group's changes over time) whose key
    # ranges overlap: part a of A and part b of B share a key exactly when
    # a * B < (b + 1) * A and b * A < (a + 1) * B (src/keyspace.h).
    ("overlapping_ownership",
     "SELECT count(*) FROM sqlgroup.ownership_log x "
     "JOIN sqlgroup.ownership_log y ON x.group_name = y.group_name "
     "AND x.epoch < y.epoch AND " + _OVERLAP.format(x="x", y="y") + " "
     "WHERE x.group_name = 'chaos' "
     "AND y.acquired_at < coalesce(x.released_at, 'infinity') "
     "AND x.acquired_at < coalesce(y.released_at, 'infinity')",
     "pairs of takes of overlapping key ranges (one part, or parts of two "
     "part counts) whose ownership intervals overlap"),
    ("overlapping_ranges_now", OVERLAPPING_NOW,
     "pairs of current owners whose key ranges overlap (sampled throughout "
     "a run, and at the end)"),
    ("ack_outside_ownership",
     "SELECT count(*) FROM sqlgroup_demo.results r WHERE NOT EXISTS ("
     "  SELECT 1 FROM sqlgroup.ownership_log l WHERE l.group_name = 'chaos' "
     "  AND l.part = r.part AND l.epoch = r.epoch "
     "  AND l.session_id = r.session_id AND l.acquired_at <= r.acked_at "
     "  AND r.acked_at < coalesce(l.released_at, 'infinity'))",
     "acknowledgements committed by a member not owning the part then "
     "(a lost claim or a zombie)"),
    ("open_log_mismatch",
     "SELECT count(*) FROM (SELECT * FROM sqlgroup.session_parts "
     "  WHERE group_name = 'chaos') sp "
     "FULL JOIN (SELECT * FROM sqlgroup.ownership_log "
     "  WHERE group_name = 'chaos' AND released_at IS NULL) l "
     "USING (group_name, part, epoch) "
     "WHERE sp.session_id IS DISTINCT FROM l.session_id",
     "current owners that the ownership log does not show as open"),
    # Each key's items end acknowledged (results.acked_at) or dead-lettered
    # (dead_items.died_at), both the database clock inside the transaction
    # that ends the item; the next item of the key is handed out only after
    # that transaction committed, so in time order the numbers of a key
    # only grow. A dead-lettered item releases the next one: it takes its
    # place in the order at its death (a row acknowledged and dead-lettered
    # counts as dead; acked_and_dead reports it). A step back is a
    # violation; a repeat is a duplicate and a gap a loss, counted above.
    ("key_order",
     "WITH ends AS ("
     "  SELECT r.key, r.acked_at AS at, r.item_id AS id, "
     + _SEQ.format("r.payload") + " AS seq "
     "  FROM sqlgroup_demo.results r WHERE r.key IS NOT NULL "
     "  AND NOT EXISTS (SELECT 1 FROM sqlgroup.dead_items d "
     "    WHERE d.group_name = 'chaos' AND d.id = r.item_id) "
     "  UNION ALL "
     "  SELECT d.key, d.died_at, d.id, " + _SEQ.format("d.payload") +
     "  FROM sqlgroup.dead_items d "
     "  WHERE d.group_name = 'chaos' AND d.key IS NOT NULL), "
     "steps AS (SELECT seq, lag(seq) OVER (PARTITION BY key "
     "  ORDER BY at, id) AS prev FROM ends WHERE seq IS NOT NULL) "
     "SELECT count(*) FROM steps WHERE seq < prev",
     "items of a key acknowledged or dead-lettered after a later item of "
     "the same key (adjacent pairs, in database time, that step back)"),
]


# After every member left gracefully: each take must have been closed.
AFTER_LEAVE = [
    ("unclosed_takes",
     "SELECT count(*) FROM sqlgroup.ownership_log "
     "WHERE group_name = 'chaos' AND released_at IS NULL",
     "takes the ownership log still shows open after every member left"),
]

NAMES = [c[0] for c in CHECKS + AFTER_LEAVE] + ["wrong_part",
                                                "unclean_exits",
                                                "producer_failures",
                                                "producer_mismatch",
                                                "handler_overlaps",
                                                "acked_unhandled",
                                                "noted_twice",
                                                "acked_unnoted",
                                                "noted_unacked",
                                                "delivered_while_paused"]


def part_of(uuid_text, parts):
    """The part whose key range holds the item id (design.md's ranges)."""
    x = int(uuid_text.replace("-", ""), 16)
    p = (x * parts) >> 128
    # floor(p * 2^128 / P) <= x < floor((p + 1) * 2^128 / P)
    while p + 1 < parts and ((p + 1) << 128) // parts <= x:
        p += 1
    while p > 0 and (p << 128) // parts > x:
        p -= 1
    return p


def for_group(sql, group):
    """`sql`, written for group 'chaos', for `group`: its name replaced,
    and the record handler's results narrowed to the group's rows (groups
    that read one topic share item ids; a row of a release before 0.20
    names no group, and is taken to be the group's)."""
    g = f"'{group}'"
    sql = sql.replace("'chaos'", g)
    if "sqlgroup_demo.results" not in sql:
        return sql
    sql = sql.replace("sqlgroup_demo.results", "results")
    results = ("results AS (SELECT * FROM sqlgroup_demo.results r WHERE "
               f"coalesce(to_jsonb(r) ->> 'group_name', {g}) = {g})")
    if sql.startswith("WITH "):
        return f"WITH {results}, {sql[len('WITH '):]}"
    return f"WITH {results} {sql}"


def check(query, skip=(), group="chaos"):
    """Runs every check not in `skip` on `group`; returns {name: count},
    plus 'wrong_part' (results acknowledged under a part whose range,
    under the part count of its take, does not hold the item)."""
    found = {}
    for name, sql, _ in CHECKS:
        if name not in skip:
            found[name] = int(query(for_group(sql, group))[0][0])
    if "wrong_part" in skip:
        return found
    wrong = 0
    for item_id, part, parts in query(for_group(
            "SELECT r.item_id::text, r.part, l.parts_of "
            "FROM sqlgroup_demo.results r JOIN sqlgroup.ownership_log l "
            "ON l.group_name = 'chaos' AND l.epoch = r.epoch", group)):
        wrong += part_of(item_id, int(parts)) != int(part)
    found["wrong_part"] = wrong
    return found


# Checks that read the `record` handler's result rows (and the producers'
# tally): the slow profile's exec handler writes none, so it skips them.
RESULT_CHECKS = ["duplicates", "lost", "unexplained", "acked_and_dead",
                 "ack_outside_ownership", "key_order", "wrong_part"]


def read_deliveries(paths):
    """The deliveries in tests/support/slow_handler.py logs: {item id:
    [delivery]}, each a dict with the log it came from (one per member
    process), the handler's pid, attempt, start, end and whether it was cut
    off. A delivery with no "end" line was cut off (its process killed): it
    ended within 0.1 s of its last line, which `end` is then."""
    runs = {}
    for path in paths:
        try:
            f = open(path, errors="replace")
        except FileNotFoundError:  # a member that never ran an item
            continue
        open_ = {}  # (id, pid, attempt) -> the delivery still running
        with f:
            for line in f:
                fields = line.split()
                if len(fields) != 5:
                    continue  # a line cut short by a kill
                event, item, pid, attempt, at = fields
                try:
                    at = float(at)
                except ValueError:
                    continue
                k = (item, pid, attempt)
                if event == "start":
                    d = {"log": path, "pid": pid, "attempt": int(attempt),
                         "start": at, "end": at + 0.1, "cut": True}
                    runs.setdefault(item, []).append(d)
                    open_[k] = d
                elif k in open_:
                    d = open_[k]
                    if event == "end":
                        d["end"], d["cut"] = at, False
                        del open_[k]
                    else:
                        d["end"] = at + 0.1
    return runs


def handler_overlaps(runs, unresponsive):
    """Invariant 10 from the handlers' own logs: pairs of deliveries of one
    item by two handler processes that overlapped in time, except where the
    whole overlap lies in a time when the member process of one of the two
    (named by its handler log) was dead or paused to the database:
    `unresponsive` maps a handler log to [(from, to)] (kill -9: from the
    kill on; SIGSTOP past the TTL: until it registered again). Returns
    (violations, excused, [a few violating pairs for the log])."""
    def excused(d, lo, hi):
        return any(a <= lo and hi <= b
                   for a, b in unresponsive.get(d["log"], []))

    bad, ok, examples = 0, 0, []
    for item, ds in runs.items():
        for i in range(len(ds)):
            for j in range(i + 1, len(ds)):
                a, b = ds[i], ds[j]
                if a["pid"] == b["pid"]:
                    continue
                lo, hi = max(a["start"], b["start"]), min(a["end"], b["end"])
                if lo >= hi:
                    continue
                if excused(a, lo, hi) or excused(b, lo, hi):
                    ok += 1
                    continue
                bad += 1
                if len(examples) < 5:
                    examples.append((item, a, b))
    return bad, ok, examples


def acked_unhandled(query, runs, tally):
    """The fast profile's check of acks that gather (issue 43): items the
    producer enqueued (`tally`, written by the enqueuing statement) that
    were acknowledged -- neither waiting nor dead-lettered after the drain
    -- yet have no delivery whose handler returned in the handlers' logs
    (`runs`, read_deliveries). slow_handler.py logs "end" before it says
    ok, so an ack that committed after its handler returned always has
    one: an item without is an ack committed for a call that failed, was
    cut off, or never ran."""
    acked = query(
        f"SELECT t.id::text FROM {tally} t WHERE NOT EXISTS (SELECT 1 FROM "
        "sqlgroup.items i WHERE i.group_name = 'chaos' AND i.id = t.id) "
        "AND NOT EXISTS (SELECT 1 FROM sqlgroup.dead_items d WHERE "
        "d.group_name = 'chaos' AND d.id = t.id)")
    return sum(not any(not d["cut"] for d in runs.get(row[0], []))
               for row in acked)


def sql_call_checks(query, tally, noted):
    """The sql profile's exactly once, from the database alone: the items
    the producer enqueued (`tally`) against the notes the members' SQL
    function wrote (`noted`, one row a call, committed with the item's
    ack or not at all). Returns {check: violations}."""
    acked = ("NOT EXISTS (SELECT 1 FROM sqlgroup.items i WHERE "
             "i.group_name = 'chaos' AND i.id = {x}.id) AND NOT EXISTS "
             "(SELECT 1 FROM sqlgroup.dead_items d WHERE d.group_name = "
             "'chaos' AND d.id = {x}.id)")
    return {
        "noted_twice": int(query(
            f"SELECT count(*) FROM (SELECT id FROM {noted} GROUP BY id "
            "HAVING count(*) > 1) d")[0][0]),
        "acked_unnoted": int(query(
            f"SELECT count(*) FROM {tally} t WHERE "
            + acked.format(x="t") +
            f" AND NOT EXISTS (SELECT 1 FROM {noted} n WHERE n.id = t.id)"
        )[0][0]),
        "noted_unacked": int(query(
            f"SELECT count(DISTINCT n.id) FROM {noted} n WHERE NOT ("
            + acked.format(x="n") + ")")[0][0]),
    }


def check_after_leave(query, group="chaos"):
    return {name: int(query(for_group(sql, group))[0][0])
            for name, sql, _ in AFTER_LEAVE}


def meaning(name):
    for n, _, text in CHECKS + AFTER_LEAVE:
        if n == name:
            return text
    if name == "unclean_exits":
        return "members that did not exit 0 on SIGTERM at the end"
    if name == "producer_mismatch":
        return ("items the producers' tally shows enqueued, minus what "
                "their runs that exited 0 were asked for (a batch added "
                "twice or lost on a retry)")
    if name == "handler_overlaps":
        return ("pairs of deliveries of one item by two handler processes "
                "that overlapped in time while both members were live to "
                "the database (invariant 10, from the handlers' logs)")
    if name == "acked_unhandled":
        return ("items acknowledged with no handler call that returned in "
                "the handlers' logs (an ack gathered for a call that failed "
                "or was cut off)")
    if name == "noted_twice":
        return ("items whose SQL function's work committed more than once "
                "(the sql profile: not exactly once)")
    if name == "acked_unnoted":
        return ("items acknowledged without their SQL function's work "
                "committed with them")
    if name == "noted_unacked":
        return ("items still waiting or dead-lettered whose SQL function's "
                "work committed")
    if name == "delivered_while_paused":
        return ("acknowledged deliveries of a paused group or key that "
                "began more than a second after the pause (`group pause`)")
    if name == "producer_failures":
        return ("`sqlgroup produce` runs that exited non-zero (gave up on a "
                "batch within --retry_for)")
    return "results acknowledged under a part that does not hold the item"
