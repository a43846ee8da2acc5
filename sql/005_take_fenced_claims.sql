-- sqlgroup schema version 5: a claim is the take, not a write to the item.
-- A part has one owner at a time (session_parts), and only that owner's
-- consumer reads items in the part's key range, so marking each item as
-- claimed guarded nothing the take did not already guard. It cost a new
-- version of the items row, with new entries in two indexes, for every
-- item claimed: at 8 consumers the batch handler ran at 31% of
-- PostgreSQL's 100-row delete limit, and at 10 million waiting items each
-- 64-item claim dirtied ~64 heap pages (bench/RESULTS.md). Claims are now
-- reads, and the ack, release and dead-letter statements are fenced on
-- the take itself: the session_parts row of this session, part and epoch
-- must exist, its session must be alive by the database clock, and the
-- statement holds FOR KEY SHARE on that row, so a drop or a reap of the
-- part waits for an ack in flight and never interleaves with it.
--
-- Stop every member before applying this: members of schema 4 claim by
-- writing the columns dropped here.

DROP INDEX IF EXISTS sqlgroup.items_claims;
DROP INDEX IF EXISTS sqlgroup.items_unclaimed;
DROP INDEX IF EXISTS sqlgroup.items_waiting_since;
ALTER TABLE sqlgroup.items DROP CONSTRAINT IF EXISTS items_claim;
ALTER TABLE sqlgroup.items DROP CONSTRAINT IF EXISTS items_claim_whole;
ALTER TABLE sqlgroup.items DROP COLUMN IF EXISTS claim_session;
ALTER TABLE sqlgroup.items DROP COLUMN IF EXISTS claim_part;
ALTER TABLE sqlgroup.items DROP COLUMN IF EXISTS claim_epoch;
ALTER TABLE sqlgroup.items DROP COLUMN IF EXISTS claimed_at;

-- "Items of a group in a key range, in key order" is the primary key: the
-- claim sweep and the probes read it from their cursor, so their cost does
-- not grow with the backlog. (The unclaimed-items index carried not_before
-- so items in backoff were skipped without visiting the table; but a
-- claim's plain index scan checks it on the table row anyway, and the
-- index cost every enqueue an entry (300,000 enqueued in 5.1-5.4 s
-- without it, 6.2-6.5 s with) and every release a non-HOT update.)
-- The age of a part's oldest waiting item, cheap at any backlog (see
-- schema 2).
CREATE INDEX IF NOT EXISTS items_waiting_since
  ON sqlgroup.items (group_name, enqueued_at);
