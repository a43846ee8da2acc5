-- sqlgroup schema version 17: operate the items without touching the
-- tables (issue 39): dead letters listed, shown, requeued and purged;
-- waiting items listed and shown; groups and keys paused and resumed.
-- members-from: 17
--
-- Each operation is one SQL function here (SECURITY DEFINER, callable in
-- the operator's own transaction); `sqlgroup dead|items|group pause` and
-- the C++ Admin call the same functions. EXECUTE is revoked from PUBLIC:
-- `sqlgroup grant --operator_role` gives it (sql/grants/operator.sql).
--
-- Contract: a pause is enforced in the members' claims, which members of
-- 0.16 do not know; they would go on handing out a paused group's items,
-- so they must stop before this schema (members-from 17).

-- A paused group (block '') or key (block: the first 18 characters of the
-- text of its items' ids, the top 64 bits, as the claims compare them).
CREATE TABLE IF NOT EXISTS sqlgroup.pauses (
  group_name text NOT NULL
    REFERENCES sqlgroup.groups (name) ON DELETE CASCADE,
  block text NOT NULL,
  key text,
  paused_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  paused_by text NOT NULL DEFAULT session_user,
  PRIMARY KEY (group_name, block),
  CONSTRAINT pauses_key_or_group CHECK ((block = '') = (key IS NULL))
);

-- Members read the pauses in every claim: every role that may heartbeat a
-- session (a member's, granted before this migration) may read them, so
-- that members keep claiming once they prepare the new claims
-- (sql/grants/member.sql has the grant for roles granted later).
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
    EXECUTE format('GRANT SELECT ON sqlgroup.pauses TO %s',
                   CASE WHEN r.grantee = 'PUBLIC' THEN 'PUBLIC'
                        ELSE quote_ident(r.grantee) END);
  END LOOP;
END
$$;

-- When an item was put back from the dead letters at its old place in
-- its key (dead_requeue, position 'original'): it may be older than the
-- key's item a member is handling now, whose successor the member reads
-- next (the claims look for such items through this small index only).
ALTER TABLE sqlgroup.items ADD COLUMN IF NOT EXISTS requeued_at timestamptz;
CREATE INDEX IF NOT EXISTS items_requeued ON sqlgroup.items (group_name, id)
  WHERE requeued_at IS NOT NULL;

CREATE INDEX IF NOT EXISTS dead_items_died_at
  ON sqlgroup.dead_items (group_name, died_at);

-- The first 18 characters of the ids of `key`'s items (its block).
CREATE OR REPLACE FUNCTION sqlgroup.key_prefix(key text) RETURNS text
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  SET search_path = pg_catalog, pg_temp
AS $fn$
  SELECT left(sqlgroup.id_of(sqlgroup.signed64(sqlgroup.key_block(key)), 0)
              ::text, 18)
$fn$;

-- The part of `parts` whose key range holds `id`: ranges start at
-- floor(i * 2^128 / parts) (src/keyspace.cc), so the part is
-- ceil((id + 1) * parts / 2^128) - 1 = floor(((id + 1) * parts - 1) / 2^128),
-- in integer division (numeric division rounds).
CREATE OR REPLACE FUNCTION sqlgroup.id_part(id uuid, parts integer)
  RETURNS integer
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  SET search_path = pg_catalog, pg_temp
AS $fn$
  SELECT div((v + 1) * parts - 1,
             340282366920938463463374607431768211456::numeric)::integer
  FROM (SELECT (CASE WHEN h < 0 THEN h + 18446744073709551616 ELSE h END)
               * 18446744073709551616
               + CASE WHEN l < 0 THEN l + 18446744073709551616 ELSE l END AS v
        FROM (SELECT ('x' || substr(replace(id::text, '-', ''), 1, 16))
                       ::bit(64)::bigint::numeric AS h,
                     ('x' || substr(replace(id::text, '-', ''), 17, 16))
                       ::bit(64)::bigint::numeric AS l) x) y
$fn$;

-- The first and last ids of part `part` of `parts`.
CREATE OR REPLACE FUNCTION sqlgroup.part_bounds(part integer, parts integer,
                                                OUT first_id uuid,
                                                OUT last_id uuid)
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  SET search_path = pg_catalog, pg_temp
AS $fn$
  SELECT sqlgroup.id_of(sqlgroup.signed64(div(lo, 18446744073709551616)),
                        sqlgroup.signed64(mod(lo, 18446744073709551616))),
         sqlgroup.id_of(sqlgroup.signed64(div(hi, 18446744073709551616)),
                        sqlgroup.signed64(mod(hi, 18446744073709551616)))
  FROM (SELECT div(part * 340282366920938463463374607431768211456::numeric,
                   parts) AS lo,
               div((part + 1)
                   * 340282366920938463463374607431768211456::numeric,
                   parts) - 1 AS hi) b
$fn$;

-- Raises the operations' common refusals: no such group (P0002).
CREATE OR REPLACE FUNCTION sqlgroup.operated_group(group_name text)
  RETURNS sqlgroup.groups
  LANGUAGE plpgsql STABLE
  SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  g sqlgroup.groups;
BEGIN
  SELECT * INTO g FROM sqlgroup.groups WHERE name = operated_group.group_name;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'no_data_found',
      MESSAGE = format('group %s does not exist; `sqlgroup group list` '
                       'shows the groups', coalesce(group_name, 'NULL'));
  END IF;
  RETURN g;
END
$fn$;

-- Which of a selection's forms was given: exactly one (22023 otherwise).
CREATE OR REPLACE FUNCTION sqlgroup.one_selector(what text, forms text,
                                                 VARIADIC given boolean[])
  RETURNS void
  LANGUAGE plpgsql IMMUTABLE
  SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  n integer := (SELECT count(*) FROM unnest(given) g WHERE g);
BEGIN
  IF n <> 1 THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
      MESSAGE = format('%s needs exactly one of %s, got %s; nothing was '
                       'changed', what, forms, n);
  END IF;
END
$fn$;

-- A list's limit: at least 1 (22023 otherwise).
CREATE OR REPLACE FUNCTION sqlgroup.check_limit(max_rows integer)
  RETURNS void
  LANGUAGE plpgsql IMMUTABLE
  SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
  IF max_rows IS NULL OR max_rows < 1 THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
      MESSAGE = format('the limit must be at least 1, got %s',
                       coalesce(max_rows::text, 'NULL'));
  END IF;
END
$fn$;

-- The dead letters of a group, oldest death first: those of `of_key`, whose
-- last error contains `error`, died at or after `since`; at most
-- `max_rows`. `waiting_after`: for a keyed item, how many later items of
-- its key wait now (a requeue at its original place goes ahead of them;
-- NULL for an unkeyed item).
CREATE OR REPLACE FUNCTION sqlgroup.dead_list(
    group_name text, of_key text DEFAULT NULL, error text DEFAULT NULL,
    since timestamptz DEFAULT NULL, max_rows integer DEFAULT 100)
  RETURNS TABLE (id uuid, key text, attempts integer,
                 enqueued_at timestamptz, died_at timestamptz,
                 last_error text, waiting_after bigint)
  LANGUAGE plpgsql STABLE SECURITY DEFINER
  SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
  PERFORM sqlgroup.operated_group(dead_list.group_name);
  PERFORM sqlgroup.check_limit(max_rows);
  RETURN QUERY
    SELECT d.id, d.key, d.attempts, d.enqueued_at, d.died_at, d.last_error,
           CASE WHEN d.key IS NULL THEN NULL ELSE (
             SELECT count(*) FROM sqlgroup.items i
             WHERE i.group_name = d.group_name
               AND i.id > d.id
               AND i.id <= (left(d.id::text, 18) || '-ffff-ffffffffffff')::uuid
           ) END
    FROM sqlgroup.dead_items d
    WHERE d.group_name = dead_list.group_name
      AND (dead_list.of_key IS NULL OR d.key = dead_list.of_key)
      AND (dead_list.error IS NULL
           OR strpos(coalesce(d.last_error, ''), dead_list.error) > 0)
      AND (dead_list.since IS NULL OR d.died_at >= dead_list.since)
    ORDER BY d.died_at, d.id
    LIMIT max_rows;
END
$fn$;

-- One dead letter, payload included; P0002 when the group has none with
-- that id.
CREATE OR REPLACE FUNCTION sqlgroup.dead_show(group_name text, item_id uuid)
  RETURNS TABLE (id uuid, key text, payload bytea, attempts integer,
                 enqueued_at timestamptz, died_at timestamptz,
                 last_error text)
  LANGUAGE plpgsql STABLE SECURITY DEFINER
  SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
  PERFORM sqlgroup.operated_group(dead_show.group_name);
  RETURN QUERY
    SELECT d.id, d.key, d.payload, d.attempts, d.enqueued_at, d.died_at,
           d.last_error
    FROM sqlgroup.dead_items d
    WHERE d.group_name = dead_show.group_name AND d.id = dead_show.item_id;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'no_data_found',
      MESSAGE = format('group %s has no dead letter %s; `sqlgroup dead list '
                       '%s` shows them', dead_show.group_name, dead_show.item_id,
                       dead_show.group_name);
  END IF;
END
$fn$;

-- The dead letters one selection names, locked: the ids given (all of
-- them must exist: P0002 names those that do not), those of a key, those
-- whose last error contains a text, those that died before an age; all
-- when none is given. In id order.
CREATE OR REPLACE FUNCTION sqlgroup.dead_selected(
    group_name text, ids uuid[], of_key text, error text, older_than interval)
  RETURNS SETOF sqlgroup.dead_items
  LANGUAGE plpgsql
  SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
  v_missing uuid[];
BEGIN
  IF ids IS NOT NULL THEN
    SELECT array_agg(g.id ORDER BY g.id) INTO v_missing
      FROM unnest(ids) AS g(id)
      WHERE NOT EXISTS (SELECT 1 FROM sqlgroup.dead_items d
                        WHERE d.group_name = dead_selected.group_name
                          AND d.id = g.id);
    IF v_missing IS NOT NULL THEN
      RAISE EXCEPTION USING ERRCODE = 'no_data_found',
        MESSAGE = format('group %s has no dead letter %s; nothing was '
                         'changed (`sqlgroup dead list %s` shows them)',
                         group_name,
                         array_to_string(v_missing[1:5], ', ')
                         || CASE WHEN cardinality(v_missing) > 5
                                 THEN format(' (and %s more)',
                                             cardinality(v_missing) - 5)
                                 ELSE '' END,
                         group_name);
    END IF;
  END IF;
  RETURN QUERY
    SELECT d.* FROM sqlgroup.dead_items d
    WHERE d.group_name = dead_selected.group_name
      AND (ids IS NULL OR d.id = ANY (ids))
      AND (dead_selected.of_key IS NULL OR d.key = dead_selected.of_key)
      AND (error IS NULL OR strpos(coalesce(d.last_error, ''), error) > 0)
      AND (older_than IS NULL OR d.died_at < clock_timestamp() - older_than)
    ORDER BY d.id
    FOR UPDATE;
END
$fn$;

-- Puts dead letters back into their group with a fresh attempt count and
-- wakes its members. `position`: 'original' puts each back with its own
-- id, at its old place in its key (its key's head again, ahead of the
-- key's later items still waiting: a requeue that keeps the order of what
-- waits); 'tail' gives it a new id after its key's last item (as if
-- enqueued now: the key's backlog goes first). Unkeyed items have no
-- order to keep. Select with exactly one of ids, key, error or
-- all_items. With dry_run nothing changes. Returns each item's old and
-- new id.
CREATE OR REPLACE FUNCTION sqlgroup.dead_requeue(
    group_name text, ids uuid[] DEFAULT NULL, of_key text DEFAULT NULL,
    error text DEFAULT NULL, all_items boolean DEFAULT false,
    "position" text DEFAULT 'original', dry_run boolean DEFAULT false)
  RETURNS TABLE (id uuid, key text, new_id uuid)
  LANGUAGE plpgsql VOLATILE SECURITY DEFINER
  SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
  g     sqlgroup.groups;
  d     sqlgroup.dead_items;
  v_id  uuid;
  v_now bigint;
  v_hi  bigint;
  v_new uuid[] := '{}';
  v_old uuid[] := '{}';
BEGIN
  g := sqlgroup.operated_group(dead_requeue.group_name);
  PERFORM sqlgroup.one_selector('requeue', 'ids, a key, an error or all',
                                ids IS NOT NULL, dead_requeue.of_key IS NOT NULL,
                                error IS NOT NULL, coalesce(all_items, false));
  IF "position" IS NULL OR "position" NOT IN ('original', 'tail') THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
      MESSAGE = format('position %s is not one of original (back at its old '
                       'place in its key) or tail (after its key''s last '
                       'item); nothing was changed',
                       coalesce("position", 'NULL'));
  END IF;
  -- The group's row, shared: not deleted while its items come back.
  PERFORM 1 FROM sqlgroup.groups WHERE name = g.name FOR SHARE;
  FOR d IN SELECT * FROM sqlgroup.dead_selected(g.name, ids,
                                                dead_requeue.of_key, error,
                                                NULL)
  LOOP
    IF "position" = 'original' THEN
      v_id := d.id;
    ELSE
      v_now := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
      IF d.key IS NULL THEN
        v_id := sqlgroup.unkeyed_id(floor(random() * g.parts)::integer,
                                    g.parts, v_now);
      ELSE
        v_hi := sqlgroup.signed64(sqlgroup.key_block(d.key));
        v_id := sqlgroup.keyed_id(v_hi, greatest(v_now,
                  sqlgroup.block_next_time(g.name, v_hi)));
      END IF;
    END IF;
    IF NOT coalesce(dry_run, false) THEN
      LOOP
        INSERT INTO sqlgroup.items (group_name, id, key, payload,
                                    enqueued_at, requeued_at)
        VALUES (g.name, v_id, d.key, d.payload, d.enqueued_at,
                CASE WHEN "position" = 'original' AND d.key IS NOT NULL
                     THEN clock_timestamp() END)
        ON CONFLICT (group_name, id) DO NOTHING;
        EXIT WHEN FOUND;
        v_id := sqlgroup.with_fresh_noise(v_id);
      END LOOP;
      v_old := v_old || d.id;
      v_new := v_new || v_id;
    END IF;
    id := d.id;
    key := d.key;
    new_id := v_id;
    RETURN NEXT;
  END LOOP;
  IF cardinality(v_new) > 0 THEN
    DELETE FROM sqlgroup.dead_items x
      WHERE x.group_name = g.name AND x.id = ANY (v_old);
    PERFORM sqlgroup.announce_items(g.name, interval '0', v_new);
  END IF;
END
$fn$;

-- Deletes dead letters for good: exactly one of ids, key, older_than (died
-- longer ago than that) or all_items. With dry_run nothing changes.
CREATE OR REPLACE FUNCTION sqlgroup.dead_purge(
    group_name text, ids uuid[] DEFAULT NULL, of_key text DEFAULT NULL,
    older_than interval DEFAULT NULL, all_items boolean DEFAULT false,
    dry_run boolean DEFAULT false)
  RETURNS TABLE (id uuid, key text, died_at timestamptz)
  LANGUAGE plpgsql VOLATILE SECURITY DEFINER
  SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
  g sqlgroup.groups;
BEGIN
  g := sqlgroup.operated_group(dead_purge.group_name);
  PERFORM sqlgroup.one_selector('purge', 'ids, a key, an age or all',
                                ids IS NOT NULL, dead_purge.of_key IS NOT NULL,
                                older_than IS NOT NULL,
                                coalesce(all_items, false));
  IF older_than < interval '0' THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
      MESSAGE = format('the age %s is negative; nothing was changed',
                       older_than);
  END IF;
  IF coalesce(dry_run, false) THEN
    RETURN QUERY
      SELECT s.id, s.key, s.died_at
      FROM sqlgroup.dead_selected(g.name, ids, dead_purge.of_key, NULL,
                                  older_than) s;
  ELSE
    RETURN QUERY
      DELETE FROM sqlgroup.dead_items x
      USING sqlgroup.dead_selected(g.name, ids, dead_purge.of_key, NULL,
                                   older_than) s
      WHERE x.group_name = g.name AND x.id = s.id
      RETURNING x.id, x.key, x.died_at;
  END IF;
END
$fn$;

-- A group's waiting items in key order (as members read them): those of
-- `of_key`, of part `of_part` (of the group's part count now), or both;
-- at most `max_rows`.
CREATE OR REPLACE FUNCTION sqlgroup.items_list(
    group_name text, of_key text DEFAULT NULL, of_part integer DEFAULT NULL,
    max_rows integer DEFAULT 100)
  RETURNS TABLE (id uuid, key text, part integer, attempts integer,
                 due_at timestamptz, enqueued_at timestamptz,
                 payload_bytes integer, payload_preview bytea,
                 last_error text, requeued_at timestamptz)
  LANGUAGE plpgsql STABLE SECURITY DEFINER
  SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
  g     sqlgroup.groups;
  v_lo  uuid := '00000000-0000-0000-0000-000000000000';
  v_hi  uuid := 'ffffffff-ffff-ffff-ffff-ffffffffffff';
BEGIN
  g := sqlgroup.operated_group(items_list.group_name);
  PERFORM sqlgroup.check_limit(max_rows);
  IF of_part IS NOT NULL THEN
    IF of_part < 0 OR of_part >= g.parts THEN
      RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
        MESSAGE = format('group %s has parts 0 to %s; there is no part %s',
                         g.name, g.parts - 1, of_part);
    END IF;
    SELECT b.first_id, b.last_id INTO v_lo, v_hi
      FROM sqlgroup.part_bounds(of_part, g.parts) b;
  END IF;
  IF items_list.of_key IS NOT NULL THEN
    v_lo := greatest(v_lo, (sqlgroup.key_prefix(items_list.of_key)
                            || '-0000-000000000000')::uuid);
    v_hi := least(v_hi, (sqlgroup.key_prefix(items_list.of_key)
                         || '-ffff-ffffffffffff')::uuid);
  END IF;
  RETURN QUERY
    SELECT i.id, i.key, sqlgroup.id_part(i.id, g.parts), i.attempts,
           greatest(i.not_before, i.enqueued_at), i.enqueued_at,
           octet_length(i.payload), substr(i.payload, 1, 64), i.last_error,
           i.requeued_at
    FROM sqlgroup.items i
    WHERE i.group_name = g.name AND i.id BETWEEN v_lo AND v_hi
      AND (items_list.of_key IS NULL OR i.key = items_list.of_key)
    ORDER BY i.id
    LIMIT max_rows;
END
$fn$;

-- One waiting item, payload included; P0002 when the group has none with
-- that id (acknowledged, dead or never there).
CREATE OR REPLACE FUNCTION sqlgroup.items_show(group_name text, item_id uuid)
  RETURNS TABLE (id uuid, key text, part integer, payload bytea,
                 attempts integer, due_at timestamptz,
                 enqueued_at timestamptz, last_error text,
                 requeued_at timestamptz)
  LANGUAGE plpgsql STABLE SECURITY DEFINER
  SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
  g sqlgroup.groups;
BEGIN
  g := sqlgroup.operated_group(items_show.group_name);
  RETURN QUERY
    SELECT i.id, i.key, sqlgroup.id_part(i.id, g.parts), i.payload,
           i.attempts, greatest(i.not_before, i.enqueued_at), i.enqueued_at,
           i.last_error, i.requeued_at
    FROM sqlgroup.items i
    WHERE i.group_name = g.name AND i.id = items_show.item_id;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'no_data_found',
      MESSAGE = format('group %s has no waiting item %s (acknowledged, '
                       'dead-lettered or never enqueued); `sqlgroup dead '
                       'show %s %s` shows it if it died',
                       g.name, items_show.item_id, g.name, items_show.item_id);
  END IF;
END
$fn$;

-- Pauses the group (of_key NULL) or one key of it: from the commit on, no
-- member claims the group's items, or the key's; items in a handler
-- finish. True when it was not paused already.
CREATE OR REPLACE FUNCTION sqlgroup.pause(group_name text,
                                          of_key text DEFAULT NULL)
  RETURNS boolean
  LANGUAGE plpgsql VOLATILE SECURITY DEFINER
  SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
  g sqlgroup.groups;
BEGIN
  g := sqlgroup.operated_group(pause.group_name);
  INSERT INTO sqlgroup.pauses (group_name, block, key)
  VALUES (g.name, coalesce(sqlgroup.key_prefix(pause.of_key), ''), pause.of_key)
  ON CONFLICT (group_name, block) DO NOTHING;
  RETURN FOUND;
END
$fn$;

-- Resumes the group (of_key NULL: keys paused one by one stay paused) or a
-- key, and wakes the members. True when it was paused.
CREATE OR REPLACE FUNCTION sqlgroup.resume(group_name text,
                                           of_key text DEFAULT NULL)
  RETURNS boolean
  LANGUAGE plpgsql VOLATILE SECURITY DEFINER
  SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
  g sqlgroup.groups;
BEGIN
  g := sqlgroup.operated_group(resume.group_name);
  DELETE FROM sqlgroup.pauses p
    WHERE p.group_name = g.name
      AND p.block = coalesce(sqlgroup.key_prefix(resume.of_key), '');
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  PERFORM sqlgroup.announce_items(g.name, interval '0');
  RETURN true;
END
$fn$;

REVOKE ALL ON FUNCTION sqlgroup.key_prefix(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION sqlgroup.id_part(uuid, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION sqlgroup.part_bounds(integer, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION sqlgroup.operated_group(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION sqlgroup.one_selector(text, text, boolean[])
  FROM PUBLIC;
REVOKE ALL ON FUNCTION sqlgroup.check_limit(integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION sqlgroup.dead_selected(text, uuid[], text, text,
                                              interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION sqlgroup.dead_list(text, text, text, timestamptz,
                                          integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION sqlgroup.dead_show(text, uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION sqlgroup.dead_requeue(text, uuid[], text, text,
                                             boolean, text, boolean)
  FROM PUBLIC;
REVOKE ALL ON FUNCTION sqlgroup.dead_purge(text, uuid[], text, interval,
                                           boolean, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION sqlgroup.items_list(text, text, integer, integer)
  FROM PUBLIC;
REVOKE ALL ON FUNCTION sqlgroup.items_show(text, uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION sqlgroup.pause(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION sqlgroup.resume(text, text) FROM PUBLIC;
