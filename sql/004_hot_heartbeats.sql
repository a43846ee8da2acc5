-- sqlgroup schema version 4: heartbeats that touch no index.
-- Every member updates its session row every heartbeat. An index on
-- heartbeated_at made each of those updates a new row version with a new
-- entry in every index of the table: 12,000 heartbeats of 200 sessions
-- (a minute of 200 members) grew the table from 4 to 40 pages and that
-- index to 48, none of them HOT. Without it, and
-- with room left on each page, the update is HOT: the new version goes on
-- the same page, no index changes, and the old one is pruned without a
-- vacuum. A group's sessions are few, so the expiry checks read them
-- through sessions_group_id.
DROP INDEX IF EXISTS sqlgroup.sessions_group_heartbeat;
ALTER TABLE sqlgroup.sessions SET (fillfactor = 50);
