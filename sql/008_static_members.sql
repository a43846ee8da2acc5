-- sqlgroup schema version 8: static members (issue 20).
--
-- A member started with an instance name and a static timeout
-- (`consume --instance NAME --static_timeout D`) is static: it keeps its
-- place in the group across restarts.
--   * At most one session per (group, instance) among static ones, as this
--     unique index enforces: a new process with the name replaces the old
--     session in the transaction that registers it (the old one's parts are
--     freed with it and, the assignment following names rather than session
--     ids, go straight back to the new one), so the old process can no
--     longer heartbeat or acknowledge; if it still runs it stops with an
--     error naming the instance instead of registering again.
--   * A static member that stops gracefully does not delete its session: it
--     sets away_until = now + static_timeout and keeps its parts, unconsumed,
--     until then. A session is alive while it heartbeats within the TTL or
--     until its away_until, whichever is later; after that it is expired and
--     reaped like any other, and its parts move.
--   * `sqlgroup group leave GROUP --instance NAME` deletes it at once
--     (scale-down; its process should be stopped first).
ALTER TABLE sqlgroup.sessions
  ADD COLUMN IF NOT EXISTS static_timeout interval,
  ADD COLUMN IF NOT EXISTS away_until timestamptz;

ALTER TABLE sqlgroup.sessions
  DROP CONSTRAINT IF EXISTS sessions_static_named;
ALTER TABLE sqlgroup.sessions
  ADD CONSTRAINT sessions_static_named
    CHECK (static_timeout IS NULL OR (instance IS NOT NULL
      AND static_timeout > interval '0'));

CREATE UNIQUE INDEX IF NOT EXISTS sessions_static_instance
  ON sqlgroup.sessions (group_name, instance)
  WHERE static_timeout IS NOT NULL;
