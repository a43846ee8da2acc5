-- sqlgroup schema version 18: dead letters kept for a group's retention,
-- then removed by its members (issue 39).
-- members-from: 17
--
-- `sqlgroup group create|alter --dead_retention D` stores D; members remove
-- the group's dead letters older than D through sqlgroup.dead_expire.
--
-- Expand: members of 0.17 neither read nor enforce the retention; they run
-- on, and the group's dead letters stay until a 0.18 member (or a purge)
-- removes them.

-- NULL: dead letters are kept until they are requeued or purged.
ALTER TABLE sqlgroup.groups ADD COLUMN IF NOT EXISTS dead_retention interval;
ALTER TABLE sqlgroup.groups DROP CONSTRAINT IF EXISTS groups_dead_retention;
ALTER TABLE sqlgroup.groups ADD CONSTRAINT groups_dead_retention
  CHECK (dead_retention IS NULL OR dead_retention > interval '0');

-- Removes at most `max_rows` (1 to 10,000) of the group's dead letters
-- that died longer ago than its retention, the oldest first, and returns
-- how many. Members call it now and then; rows another transaction holds
-- (a requeue or purge in flight) are left for the next call. A group
-- without a retention, or an unknown one, removes nothing. The group's
-- own setting decides what goes, so a member can remove nothing else.
CREATE OR REPLACE FUNCTION sqlgroup.dead_expire(
    group_name text, max_rows integer DEFAULT 1000)
  RETURNS bigint
  LANGUAGE sql VOLATILE SECURITY DEFINER
  SET search_path = pg_catalog, pg_temp
AS $fn$
  WITH expired AS (
    SELECT d.group_name, d.id
    FROM sqlgroup.dead_items d
    JOIN sqlgroup.groups g ON g.name = d.group_name
    WHERE d.group_name = $1 AND g.dead_retention IS NOT NULL
      AND d.died_at < clock_timestamp() - g.dead_retention
    ORDER BY d.died_at
    LIMIT greatest(1, least(coalesce($2, 1000), 10000))
    FOR UPDATE OF d SKIP LOCKED),
  removed AS (
    DELETE FROM sqlgroup.dead_items d USING expired e
    WHERE d.group_name = e.group_name AND d.id = e.id
    RETURNING 1)
  SELECT count(*) FROM removed
$fn$;

REVOKE ALL ON FUNCTION sqlgroup.dead_expire(text, integer) FROM PUBLIC;

-- Member roles granted before this migration may call it (as 017 did for
-- the pauses; sql/grants/member.sql has the grant for roles granted later).
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
      'GRANT EXECUTE ON FUNCTION sqlgroup.dead_expire(text, integer) TO %s',
      CASE WHEN r.grantee = 'PUBLIC' THEN 'PUBLIC'
           ELSE quote_ident(r.grantee) END);
  END LOOP;
END
$$;
