-- sqlgroup schema version 9: a live group's part count changes (issue 21).
--
-- A part is a range of the key space under a part count: part p of P
-- covers [floor(p * 2^128 / P), floor((p + 1) * 2^128 / P)). Items never
-- move; a change of groups.parts changes which ranges the parts stand for.
-- Every take now records the part count it was taken under (parts_of), so
-- takes of the old and the new layout can coexist while members move from
-- one to the other, and the database keeps their ranges apart:
--   * a take is only of the group's current layout (parts_of =
--     groups.parts, checked in the take's statement), and only when no
--     take of another layout overlaps its range (same statement); ranges
--     overlap exactly when a * B < (b + 1) * A and b * A < (a + 1) * B for
--     part a of A and part b of B (exact for integers: the floors of the
--     bounds never reorder them, since 2^128 / (A * B) > 1);
--   * the change itself (`group alter NAME --parts P2`, Admin::AlterParts)
--     runs with session_parts locked in SHARE mode, which waits for every
--     take in flight and holds new ones until it commits, so no take of
--     the old layout can commit after it (on CockroachDB, serializable
--     isolation gives the same);
--   * acknowledgements stay fenced on their own take (session, part,
--     epoch: epochs are unique), so a member that has not seen the change
--     acknowledges only while its old take exists, and a new take of an
--     overlapping range waits until every old one is dropped or reaped.
-- The primary key becomes (group_name, parts_of, part): one owner per part
-- of each layout.
ALTER TABLE sqlgroup.session_parts ADD COLUMN IF NOT EXISTS parts_of integer;
UPDATE sqlgroup.session_parts sp SET parts_of = g.parts
  FROM sqlgroup.groups g WHERE g.name = sp.group_name AND sp.parts_of IS NULL;
ALTER TABLE sqlgroup.session_parts ALTER COLUMN parts_of SET NOT NULL;
ALTER TABLE sqlgroup.session_parts DROP CONSTRAINT IF EXISTS session_parts_layout;
ALTER TABLE sqlgroup.session_parts ADD CONSTRAINT session_parts_layout
  CHECK (parts_of BETWEEN 1 AND 4096 AND part < parts_of);
ALTER TABLE sqlgroup.session_parts DROP CONSTRAINT IF EXISTS session_parts_pkey;
ALTER TABLE sqlgroup.session_parts
  ADD CONSTRAINT session_parts_pkey PRIMARY KEY (group_name, parts_of, part);

-- The history keeps the layout of every take, so overlapping ranges can be
-- checked across a change (tests/chaos/checker.py).
ALTER TABLE sqlgroup.ownership_log ADD COLUMN IF NOT EXISTS parts_of integer;
UPDATE sqlgroup.ownership_log l SET parts_of = g.parts
  FROM sqlgroup.groups g WHERE g.name = l.group_name AND l.parts_of IS NULL;

-- When the part count last changed, and from what (group describe).
ALTER TABLE sqlgroup.groups
  ADD COLUMN IF NOT EXISTS previous_parts integer,
  ADD COLUMN IF NOT EXISTS parts_changed_at timestamptz;
