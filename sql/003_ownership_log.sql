-- sqlgroup schema version 3: the history of part ownership. Every take of a
-- part adds a row in the transaction that inserts it into session_parts;
-- the transaction that removes it (a drop, a graceful leave, a reap) stamps
-- released_at. Both stamps are taken after the ownership change's own
-- statement, so a take that waited for a release is stamped after it: two
-- takes of one part never overlap in time. Operators read it to see who
-- owned what and when; the chaos suite checks its invariants against it.
CREATE TABLE sqlgroup.ownership_log (
  group_name  text        NOT NULL,
  part        integer     NOT NULL,
  epoch       bigint      NOT NULL,
  session_id  uuid        NOT NULL,
  acquired_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  released_at timestamptz,
  -- 'drop' (rebalance), 'leave' (graceful exit), 'reap' (expired session).
  released_by text,
  PRIMARY KEY (group_name, part, epoch),
  CONSTRAINT ownership_log_release_whole
    CHECK ((released_at IS NULL) = (released_by IS NULL))
);
-- A session's open takes, for stamping them when it leaves or is reaped.
CREATE INDEX ownership_log_open ON sqlgroup.ownership_log (session_id)
  WHERE released_at IS NULL;
-- Pruning released history past its retention, oldest first.
CREATE INDEX ownership_log_released
  ON sqlgroup.ownership_log (group_name, released_at)
  WHERE released_at IS NOT NULL;
