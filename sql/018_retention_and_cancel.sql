-- sqlgroup schema version 18: dead letters kept for a group's retention,
-- then removed by its members; a group's keys held behind their dead
-- letters; waiting items cancelled (issue 39).
-- members-from: 17
--
-- `sqlgroup group create|alter --dead_retention D` stores D; members remove
-- the group's dead letters older than D through sqlgroup.dead_expire.
-- `--on_dead hold` holds a key behind its dead letter: a trigger pauses the
-- key when one of its items dies, and lifts that pause once the key has no
-- dead letter left (requeued, purged or expired). `sqlgroup items cancel`
-- calls sqlgroup.items_cancel.
--
-- Expand: members of 0.17 neither read nor enforce the retention; they run
-- on, and the group's dead letters stay until a 0.18 member (or a purge)
-- removes them. A hold is a pause, which they enforce in their claims;
-- only the rest of a batch already in their hands when one of its items
-- dies is not held back (batch handlers), so `group alter --on_dead hold`
-- refuses while such members run. A cancel needs nothing of members: the
-- fence of their acknowledgement already refuses the ack of an item that
-- is gone.

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

-- What a group does with the key of an item that died: 'release' (the
-- key's next item goes on) or 'hold' (the key waits until its dead letter
-- is requeued or purged; groups of ordering 'key' only).
ALTER TABLE sqlgroup.groups ADD COLUMN IF NOT EXISTS on_dead text
  NOT NULL DEFAULT 'release';
ALTER TABLE sqlgroup.groups DROP CONSTRAINT IF EXISTS groups_on_dead;
ALTER TABLE sqlgroup.groups ADD CONSTRAINT groups_on_dead
  CHECK (on_dead IN ('release', 'hold')
         AND (on_dead = 'release' OR ordering = 'key'));

-- Who cancelled a dead letter (items_cancel); NULL for an item that died.
-- Only the latter hold their keys.
ALTER TABLE sqlgroup.dead_items ADD COLUMN IF NOT EXISTS cancelled_by text;

-- A hold is a pause of the key (sqlgroup.pauses, which every claim reads)
-- by this name, so members of 0.17 on enforce it, describe shows it and
-- `group resume --key` ends it like any pause. The group's row is read FOR
-- SHARE: a change of on_dead in flight (Admin::AlterOnDead, which lifts
-- the holds when it turns to release) commits first, and is read.
CREATE OR REPLACE FUNCTION sqlgroup.hold_dead_key()
  RETURNS trigger
  LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
  -- Not for items an operator cancels (cancelled_by).
  IF NEW.key IS NOT NULL AND NEW.cancelled_by IS NULL
     AND EXISTS (SELECT 1 FROM sqlgroup.groups g
                 WHERE g.name = NEW.group_name AND g.on_dead = 'hold'
                 FOR SHARE) THEN
    INSERT INTO sqlgroup.pauses (group_name, block, key, paused_by)
    VALUES (NEW.group_name, left(NEW.id::text, 18), NEW.key, 'on_dead hold')
    ON CONFLICT (group_name, block) DO NOTHING;
  END IF;
  RETURN NULL;
END
$fn$;

DROP TRIGGER IF EXISTS dead_items_hold ON sqlgroup.dead_items;
-- On update too: a member's dead-letter statement that meets a dead
-- letter of the same id (ON CONFLICT DO UPDATE) holds like a new one.
CREATE TRIGGER dead_items_hold AFTER INSERT OR UPDATE ON sqlgroup.dead_items
  FOR EACH ROW EXECUTE FUNCTION sqlgroup.hold_dead_key();

-- Lifts the holds of keys left without dead letters that hold (cancelled
-- ones do not) by a statement that deleted some (a requeue, a purge, the
-- retention), and wakes the members of their groups. Each hold is locked
-- before the check, which then runs in a statement of its own (a snapshot
-- taken after the lock): of two transactions that delete the last dead
-- letters of one key at once, the second to get the lock sees the
-- first's deletions, and lifts the hold.
CREATE OR REPLACE FUNCTION sqlgroup.release_dead_keys()
  RETURNS trigger
  LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  b       record;
  v_woken text[] := '{}';
BEGIN
  FOR b IN
    SELECT DISTINCT o.group_name, left(o.id::text, 18) AS block
    FROM gone o WHERE o.key IS NOT NULL AND o.cancelled_by IS NULL
    ORDER BY 1, 2
  LOOP
    PERFORM 1 FROM sqlgroup.pauses p
      WHERE p.group_name = b.group_name AND p.block = b.block
        AND p.paused_by = 'on_dead hold'
      FOR UPDATE;
    CONTINUE WHEN NOT FOUND;
    CONTINUE WHEN EXISTS (
      SELECT 1 FROM sqlgroup.dead_items d
      WHERE d.group_name = b.group_name AND d.key IS NOT NULL
        AND d.cancelled_by IS NULL
        AND d.id BETWEEN (b.block || '-0000-000000000000')::uuid
                     AND (b.block || '-ffff-ffffffffffff')::uuid);
    DELETE FROM sqlgroup.pauses p
      WHERE p.group_name = b.group_name AND p.block = b.block
        AND p.paused_by = 'on_dead hold';
    IF NOT b.group_name = ANY (v_woken) THEN
      PERFORM sqlgroup.announce_items(b.group_name, interval '0');
      v_woken := v_woken || b.group_name;
    END IF;
  END LOOP;
  RETURN NULL;
END
$fn$;

DROP TRIGGER IF EXISTS dead_items_release ON sqlgroup.dead_items;
CREATE TRIGGER dead_items_release AFTER DELETE ON sqlgroup.dead_items
  REFERENCING OLD TABLE AS gone
  FOR EACH STATEMENT EXECUTE FUNCTION sqlgroup.release_dead_keys();

REVOKE ALL ON FUNCTION sqlgroup.hold_dead_key() FROM PUBLIC;
REVOKE ALL ON FUNCTION sqlgroup.release_dead_keys() FROM PUBLIC;

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

-- Cancels waiting items of a group: the ids given (all of them must be
-- waiting: P0002 names those that are not, and nothing changes), or every
-- waiting item of `of_key`. Each is moved to the dead letters with the
-- last error 'cancelled by ROLE' (a cancel is undone with dead_requeue and
-- cleaned up by dead_purge or the group's retention). Returns each item,
-- its part, its attempts and whether it may be with a handler now
-- (`may_be_running`: it was due, a running member owns its part, and it
-- heads its key); with dry_run nothing changes.
--
-- Safe against members handing the items out: the rows are locked first,
-- so an acknowledgement in flight either commits before (its item is then
-- not waiting: refused above, or not of the key any more) or waits for
-- this transaction and then deletes nothing, which its fence reads as a
-- lost claim: the member rolls back the handler's writes in that
-- transaction. An exec or http handler's outside effect may still happen
-- for an item that was running; its item stays cancelled, never also
-- acknowledged.
CREATE OR REPLACE FUNCTION sqlgroup.items_cancel(
    group_name text, ids uuid[] DEFAULT NULL, of_key text DEFAULT NULL,
    dry_run boolean DEFAULT false)
  RETURNS TABLE (id uuid, key text, part integer, attempts integer,
                 may_be_running boolean)
  LANGUAGE plpgsql VOLATILE SECURITY DEFINER
  SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
  g         sqlgroup.groups;
  v_ids     uuid[];
  v_missing uuid[];
  v_block   text;
BEGIN
  g := sqlgroup.operated_group(items_cancel.group_name);
  PERFORM sqlgroup.one_selector('cancel', 'ids or a key', ids IS NOT NULL,
                                items_cancel.of_key IS NOT NULL);
  v_block := sqlgroup.key_prefix(items_cancel.of_key);
  IF coalesce(dry_run, false) THEN  -- a look: nothing locked
    SELECT array_agg(i.id ORDER BY i.id) INTO v_ids
    FROM sqlgroup.items i
    WHERE i.group_name = g.name
      AND (ids IS NULL OR i.id = ANY (ids))
      AND (v_block IS NULL
           OR (i.id BETWEEN (v_block || '-0000-000000000000')::uuid
                        AND (v_block || '-ffff-ffffffffffff')::uuid
               AND i.key = items_cancel.of_key));
  ELSE
    SELECT array_agg(x.id ORDER BY x.id) INTO v_ids FROM (
      SELECT i.id FROM sqlgroup.items i
      WHERE i.group_name = g.name
        AND (ids IS NULL OR i.id = ANY (ids))
        AND (v_block IS NULL
             OR (i.id BETWEEN (v_block || '-0000-000000000000')::uuid
                          AND (v_block || '-ffff-ffffffffffff')::uuid
                 AND i.key = items_cancel.of_key))
      ORDER BY i.id
      FOR UPDATE OF i) x;
  END IF;
  IF ids IS NOT NULL THEN
    SELECT array_agg(u.id ORDER BY u.id) INTO v_missing
      FROM unnest(ids) AS u(id)
      WHERE u.id <> ALL (coalesce(v_ids, '{}'));
    IF v_missing IS NOT NULL THEN
      RAISE EXCEPTION USING ERRCODE = 'no_data_found',
        MESSAGE = format('group %s has no waiting item %s (acknowledged, '
                         'dead-lettered, cancelled or never enqueued); '
                         'nothing was changed (`sqlgroup items list %s` '
                         'shows what waits)',
                         g.name,
                         array_to_string(v_missing[1:5], ', ')
                         || CASE WHEN cardinality(v_missing) > 5
                                 THEN format(' (and %s more)',
                                             cardinality(v_missing) - 5)
                                 ELSE '' END,
                         g.name);
    END IF;
  ELSIF v_ids IS NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'no_data_found',
      MESSAGE = format('group %s has no waiting item of key %s; nothing '
                       'was changed', g.name, quote_literal(of_key));
  END IF;
  RETURN QUERY
    WITH selected AS (
      SELECT i.*,
        i.not_before <= clock_timestamp()
        AND EXISTS (
          SELECT 1 FROM sqlgroup.session_parts sp
          JOIN sqlgroup.sessions s
            ON s.group_name = sp.group_name AND s.id = sp.session_id
          WHERE sp.group_name = g.name
            AND sp.part = sqlgroup.id_part(i.id, coalesce(sp.parts_of,
                                                         g.parts))
            AND s.heartbeated_at > clock_timestamp() - g.session_ttl)
        AND (i.key IS NULL OR g.ordering = 'none' OR NOT EXISTS (
          SELECT 1 FROM sqlgroup.items e
          WHERE e.group_name = g.name
            AND e.id >= (left(i.id::text, 18) || '-0000-000000000000')::uuid
            AND e.id < i.id)) AS running
      FROM sqlgroup.items i
      WHERE i.group_name = g.name AND i.id = ANY (v_ids)),
    gone AS (
      DELETE FROM sqlgroup.items x USING selected s
      WHERE NOT coalesce(dry_run, false)
        AND x.group_name = g.name AND x.id = s.id
      RETURNING x.*),
    recorded AS (
      INSERT INTO sqlgroup.dead_items (group_name, id, key, payload,
                                       enqueued_at, attempts, last_error,
                                       died_at, cancelled_by)
      SELECT x.group_name, x.id, x.key, x.payload, x.enqueued_at,
             x.attempts, format('cancelled by %s', session_user),
             clock_timestamp(), session_user
      FROM gone x
      ON CONFLICT (group_name, id) DO UPDATE SET key = EXCLUDED.key,
        payload = EXCLUDED.payload, enqueued_at = EXCLUDED.enqueued_at,
        attempts = EXCLUDED.attempts, last_error = EXCLUDED.last_error,
        died_at = EXCLUDED.died_at, cancelled_by = EXCLUDED.cancelled_by
      RETURNING 1)
    SELECT s.id, s.key, sqlgroup.id_part(s.id, g.parts), s.attempts,
           s.running
    FROM selected s ORDER BY s.id;
  -- The next item of a cancelled head's key may be due now.
  IF NOT coalesce(dry_run, false) THEN
    PERFORM sqlgroup.announce_items(g.name, interval '0');
  END IF;
END
$fn$;

REVOKE ALL ON FUNCTION sqlgroup.items_cancel(text, uuid[], text, boolean)
  FROM PUBLIC;
