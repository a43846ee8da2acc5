-- sqlgroup schema version 19: roles per group (issue 42).
-- members-from: 17
--
-- `sqlgroup grant --member_role R --group G` lets R do what a member of G
-- needs and nothing for another group; `--producer_role` and
-- `--operator_role` likewise. Two mechanisms, one source of truth
-- (sqlgroup.group_grants):
--   * Row-level security on every table with a group column. A role's
--     policies name its groups as constants (sqlgroup.grant_groups writes
--     them), so a claim or an ack pays a comparison per row, no lookup; a
--     role granted every group gets `true`. The schema's owner (who
--     migrates and administers) is not subject to them, nor a superuser.
--   * The SECURITY DEFINER functions a role calls check the grant first
--     (sqlgroup.require_grant), since they run as the owner: the
--     producers' enqueue functions, members' dead_expire and every
--     operation (through operated_group).
-- Within its group, a member may not end another live session: a session
-- stores the SHA-256 of a secret only its member holds, which the member
-- sets (sqlgroup.session_secret) in the transaction that leaves. Expired
-- sessions may be reaped by any member of the group, and a static
-- member's session may be replaced by its instance (as Kafka's
-- group.instance.id fences the member it replaces); a trigger keeps a
-- member from moving a heartbeat back to expire a live session. A dead
-- letter may be written only for an item of the group that exists (the
-- statement that moves it deletes it).
--
-- Expand: every role that held privileges on the schema before keeps them
-- for all groups (policies of `true`, named "sqlgroup unscoped OID", until
-- `sqlgroup grant` replaces them), so members, producers and operators of
-- 0.17 and 0.18 run on; their sessions have no secret and may be ended by
-- any member of their group, as before.

CREATE TABLE IF NOT EXISTS sqlgroup.group_grants (
  -- pg_roles.oid, as the policies name it (a renamed role keeps its
  -- grants, a new role of a dropped one's name has none); 0: PUBLIC, for
  -- privileges granted to PUBLIC before schema 19.
  role_id oid NOT NULL,
  kind text NOT NULL CHECK (kind IN ('member', 'producer', 'operator')),
  -- A group name, or a pattern whose * stands for any characters ('*':
  -- every group, also those created later).
  group_pattern text NOT NULL
    CHECK (group_pattern ~ '^[A-Za-z0-9*][A-Za-z0-9_.*-]{0,127}$'),
  granted_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (role_id, kind, group_pattern)
);

ALTER TABLE sqlgroup.sessions ADD COLUMN IF NOT EXISTS secret_hash bytea;
COMMENT ON COLUMN sqlgroup.sessions.secret_hash IS
  'SHA-256 of the secret the member holds; it sets sqlgroup.session_secret '
  'to end its session. NULL for members before 0.19.';

-- A pattern of group_grants as a LIKE pattern (group names hold _, not %).
CREATE OR REPLACE FUNCTION sqlgroup.grant_like(pattern text) RETURNS text
  LANGUAGE sql IMMUTABLE
  SET search_path = pg_catalog, pg_temp
AS $fn$
  SELECT replace(replace(replace($1, '\', '\\'), '_', '\_'), '*', '%')
$fn$;

-- Raises 42501 unless the login role (session_user: the functions that
-- call this run as the owner, and PostgreSQL does not say who called
-- them) is a member of a role that may act as `kind` on the group: one
-- it could SET ROLE to, as a role scoped by row-level security can act
-- within its groups. The schema's owner and superusers may do everything.
CREATE OR REPLACE FUNCTION sqlgroup.require_grant(kind text, group_name text)
  RETURNS void
  LANGUAGE plpgsql STABLE SECURITY DEFINER
  SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  v_has text;
BEGIN
  IF (SELECT r.rolsuper FROM pg_roles r WHERE r.rolname = session_user)
     OR pg_has_role(session_user,
                    (SELECT n.nspowner FROM pg_namespace n
                      WHERE n.nspname = 'sqlgroup'), 'MEMBER') THEN
    RETURN;
  END IF;
  IF EXISTS (SELECT 1 FROM sqlgroup.group_grants g
              WHERE g.kind = require_grant.kind
                AND require_grant.group_name
                    LIKE sqlgroup.grant_like(g.group_pattern)
                AND CASE WHEN g.role_id = 0 THEN true
                         WHEN EXISTS (SELECT 1 FROM pg_roles r
                                       WHERE r.oid = g.role_id)
                         THEN pg_has_role(session_user, g.role_id, 'MEMBER')
                         ELSE false END) THEN
    RETURN;
  END IF;
  -- A grant replaces the role's groups: the command keeps those it has.
  v_has := (SELECT string_agg(' --group ' || g.group_pattern, ''
                              ORDER BY g.group_pattern)
              FROM sqlgroup.group_grants g
              JOIN pg_roles r ON r.oid = g.role_id
             WHERE r.rolname = session_user AND g.kind = require_grant.kind);
  RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
    MESSAGE = format('role %s may not act as %s %s of group %s; an owner '
                     'of the sqlgroup schema can allow it with `sqlgroup '
                     'grant --%s_role %s%s --group %s`',
                     session_user,
                     CASE WHEN kind = 'operator' THEN 'an' ELSE 'a' END,
                     kind, coalesce(group_name, 'NULL'), kind,
                     session_user, coalesce(v_has, ''),
                     coalesce(group_name, 'NULL'));
END
$fn$;
REVOKE ALL ON FUNCTION sqlgroup.require_grant(text, text) FROM PUBLIC;

-- A role's policies of one kind: dropped, then (unless `patterns` is
-- empty) written for its groups. Runs as the schema's owner (sqlgroup
-- grant, or psql with sql/grants/*.sql); the grant's rows are replaced.
CREATE OR REPLACE FUNCTION sqlgroup.grant_groups(kind text, role_name name,
                                                 patterns text[])
  RETURNS void
  LANGUAGE plpgsql VOLATILE
  SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  v_role oid := (SELECT r.oid FROM pg_roles r
                  WHERE r.rolname = grant_groups.role_name);
  v_tag text;
  v_policy record;
  v_likes text[];
  v_table text;
  v_wider text;
  -- The row's group, one condition per column name.
  v_in_group text;
  v_group_named text;
  -- A dead letter's item exists (the moving statement deletes it).
  v_item_exists text := 'EXISTS (SELECT 1 FROM sqlgroup.items i '
    'WHERE i.group_name = dead_items.group_name AND i.id = dead_items.id)';
  -- Ended (expired), a static member's place, or the caller's own.
  v_may_end text := '(heartbeated_at <= clock_timestamp() - (SELECT '
    'g.session_ttl FROM sqlgroup.groups g WHERE g.name = sessions.group_name) '
    'OR static_timeout IS NOT NULL OR secret_hash IS NULL '
    'OR secret_hash = sha256(convert_to(coalesce(current_setting('
    '''sqlgroup.session_secret'', true), ''''), ''UTF8'')))';
BEGIN
  IF v_role IS NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'undefined_object',
      MESSAGE = format('role %s does not exist', role_name);
  END IF;
  IF kind NOT IN ('member', 'producer', 'operator') THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
      MESSAGE = format('no grants of kind %s', kind);
  END IF;
  v_tag := format('sqlgroup %s %s', kind, v_role);
  -- The same groups again (a grant after every migrate): nothing to do.
  -- Policies are DDL and lock their tables, which would stall the members
  -- for a change of nothing. A migration that changes what the policies
  -- say writes them again itself.
  IF coalesce(cardinality(patterns), 0) > 0
     AND ARRAY(SELECT DISTINCT p FROM unnest(patterns) p ORDER BY 1)
         = ARRAY(SELECT g.group_pattern FROM sqlgroup.group_grants g
                  WHERE g.role_id = v_role AND g.kind = grant_groups.kind
                  ORDER BY 1)
     AND EXISTS (SELECT 1 FROM pg_policy p WHERE p.polname = v_tag)
     AND NOT EXISTS (SELECT 1 FROM pg_policy p
                      WHERE p.polname = 'sqlgroup unscoped ' || v_role) THEN
    RETURN;
  END IF;
  FOR v_policy IN
    SELECT p.polname, c.relname FROM pg_policy p
      JOIN pg_class c ON c.oid = p.polrelid
      JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = 'sqlgroup'
       AND (p.polname = v_tag OR p.polname LIKE v_tag || ' %'
            OR p.polname = 'sqlgroup unscoped ' || v_role)
  LOOP
    EXECUTE format('DROP POLICY %I ON sqlgroup.%I', v_policy.polname,
                   v_policy.relname);
  END LOOP;
  DELETE FROM sqlgroup.group_grants g
   WHERE g.role_id = v_role AND g.kind = grant_groups.kind;
  IF coalesce(cardinality(patterns), 0) = 0 THEN
    RETURN;
  END IF;
  IF NOT '*' = ANY (patterns)
     AND (EXISTS (SELECT 1 FROM sqlgroup.group_grants g WHERE g.role_id = 0)
          OR EXISTS (SELECT 1 FROM pg_policy p
                      WHERE p.polname = 'sqlgroup unscoped 0')) THEN
    RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state',
      MESSAGE = format('PUBLIC may act on every group (privileges granted '
        'to PUBLIC before schema 19), so scoping %s to groups would change '
        'nothing: revoke PUBLIC''s privileges on the sqlgroup schema, delete '
        'its rows (role_id 0) from sqlgroup.group_grants and drop the '
        'policies named "sqlgroup unscoped 0", then grant again', role_name);
  END IF;
  -- Nor when the role has every group anyway: row-level security does not
  -- bind it, or it is a member of a role that has every group.
  IF NOT '*' = ANY (patterns) THEN
    v_wider := (SELECT string_agg(w, '; ') FROM (
      SELECT 'it is a superuser or has BYPASSRLS' AS w FROM pg_roles r
       WHERE r.oid = v_role AND (r.rolsuper OR r.rolbypassrls)
      UNION ALL
      SELECT 'it is a member of the sqlgroup schema''s owner'
       WHERE pg_has_role(v_role, (SELECT n.nspowner FROM pg_namespace n
                                   WHERE n.nspname = 'sqlgroup'), 'MEMBER')
      UNION ALL
      SELECT DISTINCT format('it is a member of role %s, which has every '
                             'group', r.rolname)
        FROM pg_roles r
       WHERE r.oid <> v_role AND pg_has_role(v_role, r.oid, 'MEMBER')
         AND (EXISTS (SELECT 1 FROM sqlgroup.group_grants g
                       WHERE g.role_id = r.oid AND g.group_pattern = '*')
              OR EXISTS (SELECT 1 FROM pg_policy p
                          WHERE p.polname = 'sqlgroup unscoped ' || r.oid)))
      w);
    IF v_wider IS NOT NULL THEN
      RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state',
        MESSAGE = format('scoping %s to groups would change nothing: %s; '
                         'grant a role that is not', role_name, v_wider);
    END IF;
  END IF;
  INSERT INTO sqlgroup.group_grants (role_id, kind, group_pattern)
  SELECT v_role, grant_groups.kind, p FROM unnest(patterns) p
  ON CONFLICT DO NOTHING;
  IF '*' = ANY (patterns) THEN
    v_in_group := 'true';
    v_group_named := 'true';
  ELSE
    v_likes := ARRAY(SELECT sqlgroup.grant_like(p) FROM unnest(patterns) p);
    v_in_group := format('group_name LIKE ANY (%L::text[])', v_likes);
    v_group_named := format('name LIKE ANY (%L::text[])', v_likes);
  END IF;

  IF kind = 'member' THEN
    EXECUTE format('CREATE POLICY %I ON sqlgroup.groups FOR SELECT TO %I '
                   'USING (%s)', v_tag, role_name, v_group_named);
    EXECUTE format('CREATE POLICY %I ON sqlgroup.sessions FOR SELECT TO %I '
                   'USING (%s)', v_tag || ' read', role_name, v_in_group);
    EXECUTE format('CREATE POLICY %I ON sqlgroup.sessions FOR INSERT TO %I '
                   'WITH CHECK (%s)', v_tag || ' join', role_name, v_in_group);
    EXECUTE format('CREATE POLICY %I ON sqlgroup.sessions FOR UPDATE TO %I '
                   'USING (%s) WITH CHECK (%s)', v_tag || ' beat', role_name,
                   v_in_group, v_in_group);
    EXECUTE format('CREATE POLICY %I ON sqlgroup.sessions FOR DELETE TO %I '
                   'USING (%s AND %s)', v_tag || ' end', role_name,
                   v_in_group, v_may_end);
    EXECUTE format('CREATE POLICY %I ON sqlgroup.session_parts TO %I '
                   'USING (%s) WITH CHECK (%s)', v_tag, role_name, v_in_group,
                   v_in_group);
    EXECUTE format('CREATE POLICY %I ON sqlgroup.items TO %I '
                   'USING (%s) WITH CHECK (%s)', v_tag, role_name, v_in_group,
                   v_in_group);
    EXECUTE format('CREATE POLICY %I ON sqlgroup.dead_items FOR SELECT TO %I '
                   'USING (%s)', v_tag || ' read', role_name, v_in_group);
    EXECUTE format('CREATE POLICY %I ON sqlgroup.dead_items FOR INSERT TO %I '
                   'WITH CHECK (%s AND %s)', v_tag || ' die', role_name,
                   v_in_group, v_item_exists);
    EXECUTE format('CREATE POLICY %I ON sqlgroup.dead_items FOR UPDATE TO %I '
                   'USING (%s) WITH CHECK (%s AND %s)', v_tag || ' die again',
                   role_name, v_in_group, v_in_group, v_item_exists);
    EXECUTE format('CREATE POLICY %I ON sqlgroup.ownership_log TO %I '
                   'USING (%s) WITH CHECK (%s)', v_tag, role_name, v_in_group,
                   v_in_group);
    EXECUTE format('CREATE POLICY %I ON sqlgroup.pauses FOR SELECT TO %I '
                   'USING (%s)', v_tag, role_name, v_in_group);
  ELSIF kind = 'producer' THEN
    EXECUTE format('CREATE POLICY %I ON sqlgroup.groups FOR SELECT TO %I '
                   'USING (%s)', v_tag, role_name, v_group_named);
    -- Only into a group that exists: an orphan no member would ever see.
    EXECUTE format('CREATE POLICY %I ON sqlgroup.items FOR INSERT TO %I '
                   'WITH CHECK (%s AND EXISTS (SELECT 1 FROM sqlgroup.groups '
                   'g WHERE g.name = items.group_name))', v_tag, role_name,
                   v_in_group);
    EXECUTE format('CREATE POLICY %I ON sqlgroup.enqueue_keys FOR SELECT TO '
                   '%I USING (%s)', v_tag, role_name, v_in_group);
  ELSE
    EXECUTE format('CREATE POLICY %I ON sqlgroup.groups FOR SELECT TO %I '
                   'USING (%s)', v_tag, role_name, v_group_named);
    FOREACH v_table IN ARRAY ARRAY['sessions', 'session_parts', 'items',
                                   'dead_items', 'ownership_log', 'pauses']
    LOOP
      EXECUTE format('CREATE POLICY %I ON sqlgroup.%I FOR SELECT TO %I '
                     'USING (%s)', v_tag, v_table, role_name, v_in_group);
    END LOOP;
  END IF;
END
$fn$;
REVOKE ALL ON FUNCTION sqlgroup.grant_groups(text, name, text[]) FROM PUBLIC;

-- Every role that held privileges before keeps them, for every group: a
-- policy of `true` on each table it held anything on (table or column
-- privileges; PUBLIC's too), and, for the functions' checks, every group
-- for what its privileges say it is: a member (INSERT on sessions), a
-- producer (INSERT on items, or EXECUTE on enqueue), an operator (EXECUTE
-- on pause). `sqlgroup grant` replaces these with the role's groups.
DO $$
DECLARE
  v_owner oid := (SELECT n.nspowner FROM pg_namespace n
                   WHERE n.nspname = 'sqlgroup');
  r record;
BEGIN
  FOR r IN
    SELECT DISTINCT c.relname, a.grantee FROM pg_class c,
           LATERAL (SELECT (aclexplode(c.relacl)).grantee
                    UNION
                    SELECT (aclexplode(t.attacl)).grantee
                      FROM pg_attribute t
                     WHERE t.attrelid = c.oid AND t.attacl IS NOT NULL) a
     WHERE c.oid = ANY (ARRAY['sqlgroup.groups', 'sqlgroup.sessions',
                              'sqlgroup.session_parts', 'sqlgroup.items',
                              'sqlgroup.dead_items', 'sqlgroup.ownership_log',
                              'sqlgroup.pauses',
                              'sqlgroup.enqueue_keys']::regclass[])
       AND a.grantee <> v_owner
  LOOP
    EXECUTE format('CREATE POLICY %I ON sqlgroup.%I TO %s USING (true) '
                   'WITH CHECK (true)',
                   'sqlgroup unscoped ' || r.grantee, r.relname,
                   CASE WHEN r.grantee = 0 THEN 'PUBLIC'
                        ELSE quote_ident((SELECT rolname FROM pg_roles
                                           WHERE oid = r.grantee)) END);
  END LOOP;
  -- Holders of pg_read_all_data (monitoring, backups) read every row, as
  -- they did before.
  FOR r IN SELECT unnest(ARRAY['groups', 'sessions', 'session_parts',
                               'items', 'dead_items', 'ownership_log',
                               'pauses', 'enqueue_keys']) AS relname
  LOOP
    EXECUTE format('CREATE POLICY %I ON sqlgroup.%I FOR SELECT TO '
                   'pg_read_all_data USING (true)', 'sqlgroup read all data',
                   r.relname);
  END LOOP;
  INSERT INTO sqlgroup.group_grants (role_id, kind, group_pattern)
  SELECT DISTINCT k.grantee, k.kind, '*' FROM (
    SELECT 'member' AS kind, (aclexplode(c.relacl)).* FROM pg_class c
     WHERE c.oid = 'sqlgroup.sessions'::regclass
    UNION ALL
    SELECT 'producer', (aclexplode(c.relacl)).* FROM pg_class c
     WHERE c.oid = 'sqlgroup.items'::regclass
    UNION ALL
    -- Each function that checks the grant now, by the kind it checks.
    SELECT CASE WHEN p.proname = 'dead_expire' THEN 'member'
                WHEN p.proname LIKE '%enqueue%' THEN 'producer'
                ELSE 'operator' END,
           (aclexplode(p.proacl)).*
      FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
     WHERE n.nspname = 'sqlgroup'
       AND p.proname IN ('dead_expire', 'enqueue', 'enqueue_many',
                         'claim_enqueue_key', 'forget_enqueue_key',
                         'dead_list', 'dead_show', 'dead_requeue',
                         'dead_purge', 'items_list', 'items_show',
                         'items_cancel', 'pause', 'resume')) k
  WHERE k.grantee <> v_owner
    AND k.privilege_type IN ('INSERT', 'EXECUTE')
  ON CONFLICT DO NOTHING;
END
$$;

-- A heartbeat written by a member lies between the session's last one
-- and now: set back, it would expire a live session of another member,
-- which the policy would then let it delete; set ahead, the victim's own
-- heartbeats would not count until then. Clamped, not refused: an error
-- would stop a member whose database clock stepped back. Roles with the
-- owner's rights are not clamped (tests age sessions).
CREATE OR REPLACE FUNCTION sqlgroup.keep_heartbeats_forward()
  RETURNS trigger
  LANGUAGE plpgsql
  SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
  IF NOT pg_has_role(current_user,
                     (SELECT n.nspowner FROM pg_namespace n
                       WHERE n.nspname = 'sqlgroup'), 'USAGE') THEN
    NEW.heartbeated_at := least(greatest(NEW.heartbeated_at,
                                         OLD.heartbeated_at),
                                clock_timestamp());
  END IF;
  RETURN NEW;
END
$fn$;
CREATE OR REPLACE TRIGGER keep_heartbeats_forward
  BEFORE UPDATE OF heartbeated_at ON sqlgroup.sessions
  FOR EACH ROW WHEN (NEW.heartbeated_at < OLD.heartbeated_at
                     OR NEW.heartbeated_at > clock_timestamp())
  EXECUTE FUNCTION sqlgroup.keep_heartbeats_forward();

ALTER TABLE sqlgroup.groups ENABLE ROW LEVEL SECURITY;
ALTER TABLE sqlgroup.sessions ENABLE ROW LEVEL SECURITY;
ALTER TABLE sqlgroup.session_parts ENABLE ROW LEVEL SECURITY;
ALTER TABLE sqlgroup.items ENABLE ROW LEVEL SECURITY;
ALTER TABLE sqlgroup.dead_items ENABLE ROW LEVEL SECURITY;
ALTER TABLE sqlgroup.ownership_log ENABLE ROW LEVEL SECURITY;
ALTER TABLE sqlgroup.pauses ENABLE ROW LEVEL SECURITY;
ALTER TABLE sqlgroup.enqueue_keys ENABLE ROW LEVEL SECURITY;

-- Every operation names its group through operated_group: the grant is
-- checked first, so a role learns nothing of a group it may not operate.
CREATE OR REPLACE FUNCTION sqlgroup.operated_group(group_name text)
  RETURNS sqlgroup.groups
  LANGUAGE plpgsql STABLE
  SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
  g sqlgroup.groups;
BEGIN
  PERFORM sqlgroup.require_grant('operator', operated_group.group_name);
  SELECT * INTO g FROM sqlgroup.groups WHERE name = operated_group.group_name;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'no_data_found',
      MESSAGE = format('group %s does not exist; `sqlgroup group list` '
                       'shows the groups', coalesce(group_name, 'NULL'));
  END IF;
  RETURN g;
END
$fn$;

-- As in schema 18, for the members of the group only.
CREATE OR REPLACE FUNCTION sqlgroup.dead_expire(
    group_name text, max_rows integer DEFAULT 1000)
  RETURNS bigint
  LANGUAGE sql VOLATILE SECURITY DEFINER
  SET search_path = pg_catalog, pg_temp
AS $fn$
  SELECT sqlgroup.require_grant('member', $1);
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

-- The producers' functions check the grant before anything else: the
-- check is put at the head of each body as it stands (schemas 6 to 16),
-- the body otherwise unchanged; their EXECUTE grants stay. A function that
-- did not take it is an error here, not a silent gap.
DO $$
DECLARE
  v_fn regprocedure;
  v_def text;
  v_checked text;
BEGIN
  FOREACH v_fn IN ARRAY ARRAY[
    'sqlgroup.enqueue(text, text, bytea, interval)',
    'sqlgroup.enqueue(text, text, bytea, interval, text)',
    'sqlgroup.enqueue_many(text, text[], bytea[], interval)',
    'sqlgroup.enqueue_many(text, text[], bytea[], interval, text)',
    'sqlgroup.claim_enqueue_key(text, text, uuid[], text)',
    'sqlgroup.claim_enqueue_key(text, text, uuid[], text, bytea)',
    'sqlgroup.forget_enqueue_key(text, text)']::regprocedure[]
  LOOP
    v_def := pg_get_functiondef(v_fn);
    IF v_def LIKE '%require_grant%' THEN
      CONTINUE;
    END IF;
    IF (SELECT l.lanname FROM pg_proc p JOIN pg_language l
          ON l.oid = p.prolang WHERE p.oid = v_fn) = 'plpgsql' THEN
      -- The first line that is BEGIN alone opens the function's block.
      v_checked := regexp_replace(v_def, E'\nBEGIN\n',
        E'\nBEGIN\n  PERFORM sqlgroup.require_grant(''producer'', $1);\n');
    ELSE
      v_checked := regexp_replace(v_def, E'AS \\$function\\$\n',
        E'AS $function$\n  SELECT sqlgroup.require_grant(''producer'', $1);\n');
    END IF;
    IF v_checked = v_def THEN
      RAISE EXCEPTION 'schema 19: found no place for the grant check in %',
        v_fn;
    END IF;
    EXECUTE v_checked;
  END LOOP;
END
$$;
