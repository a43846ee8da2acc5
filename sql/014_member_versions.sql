-- sqlgroup schema version 14: members' versions (issue 44).
-- members-from: 13
--
-- An expand migration: it only adds, so the members of schema 13 (0.13
-- and older) keep running against it, recording nothing.
--
-- Each session records the release its member runs and the newest schema
-- it knows, for `group describe` and for `sqlgroup migrate`, which
-- refuses a schema that a live member could not run against. NULL for
-- members a release before 0.15, which count as knowing schema 13.
--
-- Each migration records the oldest schema a member may know and still
-- run against the schema it leaves (its "-- members-from:" line, as the
-- one above): an additive migration accepts the members of the release
-- before it, one that changes what members must do only its own.
ALTER TABLE sqlgroup.sessions
  ADD COLUMN IF NOT EXISTS member_version text,
  ADD COLUMN IF NOT EXISTS member_schema integer;
ALTER TABLE sqlgroup.schema_migrations
  ADD COLUMN IF NOT EXISTS members_from integer;
-- Before schema 14 a member ran only against the schema it knew.
UPDATE sqlgroup.schema_migrations SET members_from = version
WHERE version < 14;

-- A member that joined before this migration records its version when
-- told of it, under the grants it had: every role that may heartbeat a
-- session may now record a version in it (sql/grants/member.sql lists the
-- columns for the roles granted later).
DO $$
DECLARE
  r record;
BEGIN
  FOR r IN
    SELECT DISTINCT grantee FROM information_schema.column_privileges
    WHERE table_schema = 'sqlgroup' AND table_name = 'sessions'
      AND column_name = 'heartbeated_at' AND privilege_type = 'UPDATE'
      AND grantee <> (SELECT tableowner FROM pg_catalog.pg_tables
                      WHERE schemaname = 'sqlgroup' AND tablename = 'sessions')
  LOOP
    EXECUTE format(
      'GRANT UPDATE (member_version, member_schema) ON sqlgroup.sessions TO %s',
      CASE WHEN r.grantee = 'PUBLIC' THEN 'PUBLIC'
           ELSE quote_ident(r.grantee) END);
  END LOOP;
END
$$;

-- The oldest schema a member may know and run against this database.
CREATE OR REPLACE FUNCTION sqlgroup.members_from() RETURNS integer
LANGUAGE sql STABLE AS $$
  SELECT coalesce(members_from, version) FROM sqlgroup.schema_migrations
  ORDER BY version DESC LIMIT 1
$$;

-- The database's own fence: a member that knows too old a schema cannot
-- register a session, whatever its code checks (members before 0.15
-- check the schema only when they start). SQLSTATE 3F000
-- (invalid_schema_name) because members of every release stop on it, and
-- say this sentence, instead of trying again.
CREATE OR REPLACE FUNCTION sqlgroup.check_member_schema() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  needed integer := sqlgroup.members_from();
BEGIN
  IF coalesce(NEW.member_schema, 13) < needed THEN
    RAISE EXCEPTION USING ERRCODE = '3F000', MESSAGE = format(
      'the database''s sqlgroup schema accepts only members that know '
      'schema %s or newer, and this member %s: run a sqlgroup release that '
      'knows schema %s (`sqlgroup --version` says which schemas a binary '
      'knows; docs/UPGRADING.md)',
      needed,
      CASE WHEN NEW.member_schema IS NULL
        THEN 'records no version (a release before 0.15, which knows '
             'schema 13 or older)'
        ELSE format('is sqlgroup %s (it knows schema %s)',
                    NEW.member_version, NEW.member_schema) END,
      needed);
  END IF;
  RETURN NEW;
END
$$;
DROP TRIGGER IF EXISTS sessions_member_schema ON sqlgroup.sessions;
CREATE TRIGGER sessions_member_schema BEFORE INSERT ON sqlgroup.sessions
  FOR EACH ROW EXECUTE FUNCTION sqlgroup.check_member_schema();
