-- sqlgroup schema version 4: heartbeats that touch no index.
-- Every member updates its session row every heartbeat. An index on
-- heartbeated_at made each of those updates a new row version with a new
-- entry in every index of the table: with 200 members the table and that
-- index each grew by about 2 MB in 20 s between vacuums. Without it, and
-- with room left on each page, the update is HOT: the new version goes on
-- the same page, no index changes, and the old one is pruned without a
-- vacuum. A group's sessions are few, so the expiry checks read them
-- through sessions_group_id.
DROP INDEX IF EXISTS sqlgroup.sessions_group_heartbeat;
ALTER TABLE sqlgroup.sessions SET (fillfactor = 50);
