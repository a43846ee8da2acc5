-- sqlgroup schema version 11: each member's connections, for describe
-- (issue 22).
--
-- A member reports the database connections it holds (its control
-- connection, its workers' own, a listen connection) and its process's
-- budget (--max_connections) when they change, at most once a second, so
-- `group describe` shows a fleet's use of the server's connections next to
-- its members. NULL until a member reports (members older than schema 11
-- never do).
ALTER TABLE sqlgroup.sessions
  ADD COLUMN IF NOT EXISTS connections smallint,
  ADD COLUMN IF NOT EXISTS connection_budget smallint;
