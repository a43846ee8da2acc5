-- sqlgroup schema version 20: topics (issue 40).
-- members-from: 17
--
-- A topic is a named stream that several groups read, each with its own
-- parts, members, retries and dead letters. A group subscribes to at most
-- one topic (sqlgroup.subscribe); a publish (sqlgroup.publish,
-- publish_many) writes each item into every group subscribed when it
-- commits, with the same id in each, so every subscriber sees a key's
-- items in the same order. Each subscriber's copy is a row of its own:
-- an ack deletes only its group's row, so no subscriber writes a row
-- another one reads (docs/TOPICS.md has the measurements).
--
-- "Subscribed when it commits": a publish holds a shared lock on its
-- topic (an advisory lock, memory only) from before it reads the
-- subscribers until it commits, and a subscription change holds the
-- exclusive one, so a change waits for the publishes in flight and the
-- publishes after it see it. A publish in a REPEATABLE READ or
-- SERIALIZABLE transaction, whose snapshot may predate a change, also
-- locks the topic's row FOR SHARE, which every change updates: it fails
-- with a serialization error rather than miss a group.
--
-- Expand only: members never read topics, so members from 17 on run.

CREATE TABLE IF NOT EXISTS sqlgroup.topics (
  name text PRIMARY KEY
    CONSTRAINT topics_name_valid CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$'),
  created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  created_by text NOT NULL DEFAULT session_user,
  -- Moved by every subscription change (see above).
  subscriptions_changed_at timestamptz
);

ALTER TABLE sqlgroup.groups
  ADD COLUMN IF NOT EXISTS topic text
    CONSTRAINT groups_topic_fkey REFERENCES sqlgroup.topics (name)
    ON DELETE RESTRICT,
  ADD COLUMN IF NOT EXISTS subscribed_at timestamptz;
ALTER TABLE sqlgroup.groups DROP CONSTRAINT IF EXISTS groups_subscription_whole;
ALTER TABLE sqlgroup.groups ADD CONSTRAINT groups_subscription_whole
  CHECK ((topic IS NULL) = (subscribed_at IS NULL));
CREATE INDEX IF NOT EXISTS groups_topic ON sqlgroup.groups (topic)
  WHERE topic IS NOT NULL;

-- The idempotency keys of publishes, per topic (a group's enqueue_keys
-- would bind a retry to the subscribers of the first try).
CREATE TABLE IF NOT EXISTS sqlgroup.publish_keys (
  topic text NOT NULL REFERENCES sqlgroup.topics (name) ON DELETE CASCADE,
  idempotency_key text NOT NULL,
  ids uuid[] NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  -- sqlgroup.enqueue_fingerprint of the items first published with the key.
  fingerprint bytea NOT NULL,
  PRIMARY KEY (topic, idempotency_key)
);
CREATE INDEX IF NOT EXISTS publish_keys_created_at
  ON sqlgroup.publish_keys (created_at);

-- Publishing is granted per topic: kind 'publisher', whose patterns match
-- topic names (`sqlgroup grant --producer_role R --topic T`).
ALTER TABLE sqlgroup.group_grants
  DROP CONSTRAINT IF EXISTS group_grants_kind_check;
ALTER TABLE sqlgroup.group_grants ADD CONSTRAINT group_grants_kind_check
  CHECK (kind IN ('member', 'producer', 'operator', 'publisher'));

CREATE OR REPLACE FUNCTION sqlgroup.require_grant(kind text, group_name text)
RETURNS void
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_has text;
  v_role_kind text := CASE WHEN kind = 'publisher' THEN 'producer'
                           ELSE kind END;
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
  -- A grant replaces the role's groups and topics: the command keeps
  -- those it has.
  v_has := (SELECT string_agg(CASE WHEN g.kind = 'publisher' THEN ' --topic '
                                   ELSE ' --group ' END || g.group_pattern,
                              '' ORDER BY g.kind, g.group_pattern)
              FROM sqlgroup.group_grants g
              JOIN pg_roles r ON r.oid = g.role_id
             WHERE r.rolname = session_user
               AND (g.kind = require_grant.kind
                    OR g.kind IN ('producer', 'publisher')
                       AND v_role_kind = 'producer'));
  IF kind = 'publisher' THEN
    RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
      MESSAGE = format('role %s may not publish to topic %s; an owner of '
                       'the sqlgroup schema can allow it with `sqlgroup '
                       'grant --producer_role %s%s --topic %s`',
                       session_user, coalesce(group_name, 'NULL'),
                       session_user, coalesce(v_has, ''),
                       coalesce(group_name, 'NULL'));
  END IF;
  RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
    MESSAGE = format('role %s may not act as %s %s of group %s; an owner '
                     'of the sqlgroup schema can allow it with `sqlgroup '
                     'grant --%s_role %s%s --group %s`',
                     session_user,
                     CASE WHEN kind = 'operator' THEN 'an' ELSE 'a' END,
                     kind, coalesce(group_name, 'NULL'), v_role_kind,
                     session_user, coalesce(v_has, ''),
                     coalesce(group_name, 'NULL'));
END
$$;

-- The advisory lock of a topic's subscriptions: (class, hash of the name).
-- Two topics of the same hash only wait for each other's changes.
CREATE OR REPLACE FUNCTION sqlgroup.topic_lock_id(topic text) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT hashtext(topic) $$;

-- 's','q','l','t': the class of sqlgroup's topic locks.
CREATE OR REPLACE FUNCTION sqlgroup.topic_lock_class() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 1936878708 $$;

-- The name of the sequence that counts the items published to `topic` (a
-- sequence: publishes never wait for one another on it; it counts those
-- that rolled back too), from the name's MD5: any topic name fits.
CREATE OR REPLACE FUNCTION sqlgroup.topic_counter_name(topic text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT 'topic_published_' || md5(topic) $$;

-- That sequence, or NULL when it is missing (a restore without it).
CREATE OR REPLACE FUNCTION sqlgroup.topic_counter(topic text)
RETURNS regclass
LANGUAGE sql STABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT to_regclass(format('sqlgroup.%I', sqlgroup.topic_counter_name(topic)))
$$;

-- How many items were published to `topic` (NULL: no such topic), for the
-- members' metrics (sqlgroup_topic_published_items).
CREATE OR REPLACE FUNCTION sqlgroup.topic_published(topic text)
RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_seq regclass := sqlgroup.topic_counter(topic);
BEGIN
  IF v_seq IS NULL THEN
    RETURN NULL;
  END IF;
  RETURN coalesce(pg_sequence_last_value(v_seq), 0);
END
$$;

-- Creates a topic. Only the schema's owner (an administrator) may: it
-- runs as the owner, so that the topic's counter is the owner's whichever
-- of its members creates it.
CREATE OR REPLACE FUNCTION sqlgroup.topic_create(topic text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF topic IS NULL OR topic !~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$' THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_name',
      MESSAGE = format('topic name %s is invalid: use 1 to 128 letters, '
                       'digits, ''_'', ''.'' or ''-'', starting with a '
                       'letter or digit; nothing was created',
                       coalesce(quote_literal(topic), 'NULL'));
  END IF;
  IF topic = 'none' THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_name',
      MESSAGE = 'topic name none is reserved: `sqlgroup group alter G '
                '--topic none` means no topic; choose another name; nothing '
                'was created';
  END IF;
  INSERT INTO sqlgroup.topics (name) VALUES (topic_create.topic)
  ON CONFLICT DO NOTHING;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'duplicate_object',
      MESSAGE = format('topic %s already exists; `sqlgroup topic describe '
                       '%s` shows its groups', topic, topic);
  END IF;
  EXECUTE format('CREATE SEQUENCE sqlgroup.%I',
                 sqlgroup.topic_counter_name(topic));
END
$$;

-- Deletes a topic no group reads; its publish idempotency keys and its
-- counter go with it. Runs as the owner, as topic_create.
CREATE OR REPLACE FUNCTION sqlgroup.topic_delete(topic text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_groups text;
BEGIN
  PERFORM pg_advisory_xact_lock(sqlgroup.topic_lock_class(),
                                sqlgroup.topic_lock_id(topic));
  PERFORM 1 FROM sqlgroup.topics t WHERE t.name = topic_delete.topic
    FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'undefined_object',
      MESSAGE = format('topic %s does not exist; `sqlgroup topic list` '
                       'shows the topics', coalesce(topic, 'NULL'));
  END IF;
  v_groups := (SELECT CASE WHEN count(*) = 1 THEN 'group ' ELSE 'groups '
                      END || string_agg(g.name, ', ' ORDER BY g.name)
                 FROM sqlgroup.groups g WHERE g.topic = topic_delete.topic
                HAVING count(*) > 0);
  IF v_groups IS NOT NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'dependent_objects_still_exist',
      MESSAGE = format('topic %s is read by %s; unsubscribe %s with '
                       '`sqlgroup group alter GROUP --topic none` first; '
                       'nothing was deleted', topic, v_groups,
                       CASE WHEN v_groups LIKE '%,%' THEN 'each' ELSE 'it'
                       END);
  END IF;
  DELETE FROM sqlgroup.topics t WHERE t.name = topic_delete.topic;
  EXECUTE format('DROP SEQUENCE IF EXISTS sqlgroup.%I',
                 sqlgroup.topic_counter_name(topic));
END
$$;

-- Subscribes a group to a topic, or (topic NULL) ends its subscription.
-- The group receives what is published after this transaction commits.
-- Returns whether anything changed (ending no subscription changes
-- nothing); a group already subscribed is refused, naming its topic.
CREATE OR REPLACE FUNCTION sqlgroup.subscribe(group_name text, topic text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_current text;
  v_since timestamptz;
BEGIN
  -- NO KEY UPDATE: members registering (sessions' key share) go on.
  SELECT g.topic, g.subscribed_at INTO v_current, v_since
    FROM sqlgroup.groups g WHERE g.name = subscribe.group_name
    FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'undefined_object',
      MESSAGE = format('group %s does not exist; `sqlgroup group list` '
                       'shows the groups; nothing was changed',
                       coalesce(group_name, 'NULL'));
  END IF;
  IF topic IS NOT NULL AND v_current = topic THEN
    RAISE EXCEPTION USING ERRCODE = 'duplicate_object',
      MESSAGE = format('group %s is already subscribed to topic %s (since '
                       '%s); nothing was changed', group_name, topic,
                       v_since);
  END IF;
  IF topic IS NOT NULL AND v_current IS NOT NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'object_in_use',
      MESSAGE = format('group %s reads topic %s, and a group reads one '
                       'topic: end that with `sqlgroup group alter %s '
                       '--topic none` first; nothing was changed',
                       group_name, v_current, group_name);
  END IF;
  IF v_current IS NULL AND topic IS NULL THEN
    RETURN false;
  END IF;
  -- Wait for the publishes in flight; later ones see the change.
  PERFORM pg_advisory_xact_lock(sqlgroup.topic_lock_class(),
                                sqlgroup.topic_lock_id(coalesce(topic,
                                                                v_current)));
  UPDATE sqlgroup.topics t SET subscriptions_changed_at = clock_timestamp()
   WHERE t.name = coalesce(subscribe.topic, v_current);
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'undefined_object',
      MESSAGE = format('topic %s does not exist; create it with `sqlgroup '
                       'topic create %s`; nothing was changed', topic, topic);
  END IF;
  UPDATE sqlgroup.groups g
     SET topic = subscribe.topic,
         subscribed_at = CASE WHEN subscribe.topic IS NULL THEN NULL
                              ELSE clock_timestamp() END
   WHERE g.name = subscribe.group_name;
  RETURN true;
END
$$;

-- The groups subscribed to `topic` when the calling transaction commits,
-- in name order: takes the topic's shared lock (held to the end of the
-- transaction) before it reads them. Refuses an unknown topic, and one no
-- group reads (a publish would store nothing).
CREATE OR REPLACE FUNCTION sqlgroup.topic_subscribers(topic text, what text)
RETURNS text[]
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_groups text[];
BEGIN
  IF topic IS NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed',
      MESSAGE = format('%s: the topic name is NULL; pass the name of a '
                       'topic (`sqlgroup topic list` shows them); nothing '
                       'was published', what);
  END IF;
  PERFORM pg_advisory_xact_lock_shared(sqlgroup.topic_lock_class(),
                                       sqlgroup.topic_lock_id(topic));
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    PERFORM 1 FROM sqlgroup.topics t WHERE t.name = topic_subscribers.topic
      FOR SHARE;
  END IF;
  -- A statement of its own: under READ COMMITTED its snapshot is newer
  -- than the lock.
  v_groups := ARRAY(SELECT g.name FROM sqlgroup.groups g
                     WHERE g.topic = topic_subscribers.topic
                     ORDER BY g.name);
  IF cardinality(v_groups) = 0 THEN
    IF NOT EXISTS (SELECT 1 FROM sqlgroup.topics t
                    WHERE t.name = topic_subscribers.topic) THEN
      RAISE EXCEPTION USING ERRCODE = 'undefined_object',
        MESSAGE = format('%s: topic %s does not exist; create it with '
                         '`sqlgroup topic create %s` (see `sqlgroup topic '
                         'list`); nothing was published', what, topic,
                         topic);
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state',
      MESSAGE = format('%s: no group reads topic %s, so its items would '
                       'reach no one; subscribe a group first with '
                       '`sqlgroup group alter GROUP --topic %s`; nothing '
                       'was published', what, topic, topic);
  END IF;
  RETURN v_groups;
END
$$;

-- Refuses items that publish cannot store, as enqueue_many does, in
-- sqlgroup.publish's name: one delay per item (NULL, negative: refused).
CREATE OR REPLACE FUNCTION sqlgroup.check_published_items(
  keys text[], payloads bytea[], delays interval[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  max_payload constant integer := 1048576;  -- ProducerOptions' default
  v_bad record;
BEGIN
  IF keys IS NULL OR payloads IS NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed',
      MESSAGE = 'sqlgroup.publish: keys or payloads is NULL; pass two arrays '
                'of one element per item (a NULL key makes an unkeyed '
                'item); nothing was published';
  END IF;
  IF cardinality(keys) <> cardinality(payloads)
     OR cardinality(keys) <> coalesce(cardinality(delays), -1) THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
      MESSAGE = format('sqlgroup.publish: keys has %s elements, payloads %s '
                       'and delays %s; pass one key (or NULL), one payload '
                       'and one delay per item; nothing was published',
                       cardinality(keys), cardinality(payloads),
                       coalesce(cardinality(delays)::text, 'NULL'));
  END IF;
  SELECT t.ord, t.d INTO v_bad
    FROM unnest(delays) WITH ORDINALITY AS t(d, ord)
    WHERE t.d IS NULL OR t.d < interval '0'
    ORDER BY t.ord LIMIT 1;
  IF FOUND THEN
    IF v_bad.d IS NULL THEN
      RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed',
        MESSAGE = 'sqlgroup.publish: the delay is NULL; pass interval ''0'' '
                  '(or leave it out) for items due now; nothing was '
                  'published';
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
      MESSAGE = format('sqlgroup.publish: the delay %s is negative; pass '
                       'interval ''0'' for items due now, or a positive '
                       'delay; nothing was published', v_bad.d);
  END IF;
  SELECT t.ord, octet_length(t.p) AS size INTO v_bad
    FROM unnest(payloads) WITH ORDINALITY AS t(p, ord)
    WHERE t.p IS NULL OR octet_length(t.p) > max_payload
    ORDER BY t.ord LIMIT 1;
  IF FOUND THEN
    IF v_bad.size IS NULL THEN
      RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed',
        MESSAGE = format('sqlgroup.publish: the payload of item %s is NULL; '
                         'pass ''''::bytea for an empty one; nothing was '
                         'published', v_bad.ord);
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
      MESSAGE = format('sqlgroup.publish: item %s has a payload of %s bytes, '
                       'more than the limit of %s; store large data '
                       'elsewhere and publish a reference to it; nothing '
                       'was published', v_bad.ord, v_bad.size, max_payload);
  END IF;
END
$$;

-- New ids for `keys`, valid in every group of `groups` (enqueue_many's
-- layout): a key's items from the newest time of its block in any of the
-- groups on, one microsecond apart in array order; unkeyed items dealt to
-- successive parts of `parts` from a random one. A topic's items are laid
-- out for 4096 parts, so that they spread over the parts of any group.
CREATE OR REPLACE FUNCTION sqlgroup.new_item_ids(groups text[], parts integer,
                                                 keys text[])
RETURNS uuid[]
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_count integer := cardinality(keys);
  v_now bigint := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
  v_first_part integer := floor(random() * parts)::integer;
  v_run integer := least(greatest(cardinality(keys) / parts, 1), 64);
  v_ids uuid[];
BEGIN
  IF v_count = 0 THEN
    RETURN '{}';
  END IF;
  WITH u AS MATERIALIZED (
    SELECT t.ord, sqlgroup.key_block(t.k) AS block
      FROM unnest(keys) WITH ORDINALITY AS t(k, ord)
  ), r AS (
    SELECT u.ord, u.block,
           row_number() OVER (PARTITION BY u.block ORDER BY u.ord) - 1 AS rank
      FROM u
  ), b AS (
    SELECT d.block, d.hi,
           greatest(v_now, (SELECT max(sqlgroup.block_next_time(g, d.hi))
                              FROM unnest(groups) AS g)) AS base
      FROM (SELECT DISTINCT u.block, sqlgroup.signed64(u.block) AS hi
              FROM u WHERE u.block IS NOT NULL) d
  )
  SELECT array_agg(
           CASE WHEN r.block IS NULL
             THEN sqlgroup.unkeyed_id(
                    ((v_first_part + r.rank / v_run) % parts)::integer,
                    parts, v_now + r.rank)
             ELSE sqlgroup.keyed_id(b.hi, b.base + r.rank)
           END ORDER BY r.ord)
    INTO v_ids
    FROM r LEFT JOIN b ON b.block = r.block;
  RETURN v_ids;
END
$$;

-- What every publish runs: items (each with its own delay) into every
-- group subscribed to `topic` when the caller's transaction commits, the
-- same id in each, returned in array order; all or nothing. With an
-- idempotency key the topic has seen in the last idempotency_retention(),
-- it adds nothing and returns the first publish's ids (the same items
-- only: other items under the key are refused), whoever reads the topic
-- now. The C++ Producer calls it; SQL callers use publish and
-- publish_many.
CREATE OR REPLACE FUNCTION sqlgroup.publish_items(
  topic text, keys text[], payloads bytea[], delays interval[],
  idempotency_key text)
RETURNS SETOF uuid
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
  v_groups      text[];
  v_copies      integer;
  v_count       integer;
  v_fingerprint bytea;
  v_first       record;
  v_ids         uuid[];
  v_got         uuid[];
  v_got_groups  text[];
  v_pending     bigint[];  -- ordinals still to insert; NULL: all
  v_group       text;
  v_tries       integer := 0;
  v_counter     regclass;
BEGIN
  IF publish_items.topic IS NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed',
      MESSAGE = 'sqlgroup.publish: the topic name is NULL; pass the name '
                'of a topic (`sqlgroup topic list` shows them); nothing was '
                'published';
  END IF;
  PERFORM sqlgroup.check_published_items(keys, payloads, delays);
  PERFORM sqlgroup.require_grant('publisher', publish_items.topic);
  v_count := cardinality(publish_items.keys);
  IF publish_items.idempotency_key IS NOT NULL THEN
    v_fingerprint := sqlgroup.enqueue_fingerprint(
      publish_items.keys, publish_items.payloads,
      ARRAY(SELECT (extract(epoch FROM d) * 1000000)::bigint
              FROM unnest(publish_items.delays) AS d));
    -- Seen (committed) already: its answer, before anything else, so that
    -- a retry is answered whoever reads the topic now.
    SELECT k.fingerprint, k.created_at, k.ids INTO v_first
      FROM sqlgroup.publish_keys k
     WHERE k.topic = publish_items.topic
       AND k.idempotency_key = publish_items.idempotency_key;
  END IF;
  IF v_first IS NULL THEN
    v_groups := sqlgroup.topic_subscribers(publish_items.topic,
                                           'sqlgroup.publish');
  END IF;
  IF publish_items.idempotency_key IS NOT NULL AND v_first IS NULL THEN
    DELETE FROM sqlgroup.publish_keys k
     WHERE k.ctid = ANY (ARRAY(
       SELECT e.ctid FROM sqlgroup.publish_keys e
        WHERE e.created_at < now() - sqlgroup.idempotency_retention()
        LIMIT 8 FOR UPDATE SKIP LOCKED));
    -- Claimed empty, after the topic's lock (as every publish takes
    -- them): a concurrent publish with the key waits here.
    INSERT INTO sqlgroup.publish_keys (topic, idempotency_key, ids,
                                       fingerprint)
    VALUES (publish_items.topic, publish_items.idempotency_key, '{}',
            v_fingerprint)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
      SELECT k.fingerprint, k.created_at, k.ids INTO v_first
        FROM sqlgroup.publish_keys k
       WHERE k.topic = publish_items.topic
         AND k.idempotency_key = publish_items.idempotency_key;
    END IF;
  END IF;
  IF v_first IS NOT NULL THEN
    IF v_first.fingerprint IS DISTINCT FROM v_fingerprint THEN
      RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
        MESSAGE = format('idempotency key "%s" of topic %s was used at %s '
                         'for other items (%s of them): a publish with a '
                         'key it has seen adds nothing, and returns the '
                         'first one''s ids only for the same items; nothing '
                         'was published', publish_items.idempotency_key,
                         publish_items.topic, v_first.created_at,
                         cardinality(v_first.ids)),
        HINT = 'Give these items a key of their own (a key names one '
               'request); keys are kept 24 hours.';
    END IF;
    RETURN QUERY SELECT unnest(v_first.ids);
    RETURN;
  END IF;
  IF v_count = 0 THEN
    RETURN;
  END IF;
  v_copies := cardinality(v_groups);
  v_ids := sqlgroup.new_item_ids(v_groups, 4096, publish_items.keys);

  -- As in enqueue_many, an id another producer took is skipped, and the
  -- item tries again with fresh low bits, in every group: the copies it
  -- got in the others are removed first (this transaction's own rows).
  LOOP
    WITH ins AS (
      INSERT INTO sqlgroup.items (group_name, id, key, payload, not_before)
      SELECT g.name, t.id, t.k, t.p,
             CASE WHEN t.d > interval '0' THEN clock_timestamp() + t.d
                  ELSE '-infinity' END
        FROM unnest(v_ids, publish_items.keys, publish_items.payloads,
                    publish_items.delays) WITH ORDINALITY AS t(id, k, p, d, ord)
        CROSS JOIN unnest(v_groups) AS g(name)
        WHERE v_pending IS NULL OR t.ord = ANY (v_pending)
      ON CONFLICT (group_name, id) DO NOTHING
      RETURNING group_name, id)
    SELECT array_agg(ins.id), array_agg(ins.group_name)
      INTO v_got, v_got_groups FROM ins;
    EXIT WHEN coalesce(cardinality(v_got), 0)
              = v_copies * coalesce(cardinality(v_pending), v_count);
    v_tries := v_tries + 1;
    IF v_tries > 100 THEN
      RAISE EXCEPTION USING ERRCODE = 'unique_violation',
        MESSAGE = 'sqlgroup.publish: found no free id after 100 tries; '
                  'this should not happen, please report it; nothing was '
                  'published';
    END IF;
    SELECT array_agg(t.ord) INTO v_pending
      FROM unnest(v_ids) WITH ORDINALITY AS t(id, ord)
      LEFT JOIN (SELECT x.id, count(*) AS n FROM unnest(v_got) AS x(id)
                  GROUP BY x.id) c ON c.id = t.id
      WHERE (v_pending IS NULL OR t.ord = ANY (v_pending))
        AND coalesce(c.n, 0) < v_copies;
    DELETE FROM sqlgroup.items i
     USING unnest(v_got_groups, v_got) AS x(group_name, id)
     WHERE i.group_name = x.group_name AND i.id = x.id
       AND x.id = ANY (ARRAY(SELECT v_ids[o] FROM unnest(v_pending) o));
    SELECT array_agg(CASE WHEN t.ord = ANY (v_pending)
                          THEN sqlgroup.with_fresh_noise(t.id)
                          ELSE t.id END ORDER BY t.ord)
      INTO v_ids
      FROM unnest(v_ids) WITH ORDINALITY AS t(id, ord);
  END LOOP;

  -- Members wake for the items due now at once, for the soonest delayed
  -- one when it is due.
  FOREACH v_group IN ARRAY v_groups LOOP
    PERFORM sqlgroup.announce_items(v_group, interval '0',
      ARRAY(SELECT t.id FROM unnest(v_ids, publish_items.delays) AS t(id, d)
             WHERE t.d <= interval '0'))
      WHERE EXISTS (SELECT 1 FROM unnest(publish_items.delays) AS d
                     WHERE d <= interval '0');
    PERFORM sqlgroup.announce_items(v_group, min(d))
       FROM unnest(publish_items.delays) AS d WHERE d > interval '0'
      HAVING count(*) > 0;
  END LOOP;
  -- The topic's count (sqlgroup_topic_published_items): a sequence, which
  -- no publish waits for; a topic's that is missing (restored without it)
  -- counts nothing.
  v_counter := sqlgroup.topic_counter(publish_items.topic);
  IF v_counter IS NOT NULL THEN
    PERFORM nextval(v_counter) FROM generate_series(1, v_count);
  END IF;
  IF publish_items.idempotency_key IS NOT NULL THEN
    UPDATE sqlgroup.publish_keys k SET ids = v_ids
     WHERE k.topic = publish_items.topic
       AND k.idempotency_key = publish_items.idempotency_key;
  END IF;
  RETURN QUERY SELECT t.id FROM unnest(v_ids) WITH ORDINALITY AS t(id, ord)
               ORDER BY t.ord;
END
$$;

-- Publishes items to every group subscribed to `topic`: the same id in
-- each, returned in array order. All or nothing, in the caller's
-- transaction.
CREATE OR REPLACE FUNCTION sqlgroup.publish_many(
  topic text, keys text[], payloads bytea[],
  delay interval DEFAULT interval '0')
RETURNS SETOF uuid
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT sqlgroup.publish_items(
    topic, keys, payloads,
    array_fill(delay, ARRAY[coalesce(cardinality(keys), 0)]), NULL)
$$;

-- The idempotent bulk form: a publish whose key the topic has seen in the
-- last idempotency_retention() adds nothing and returns the first one's
-- ids (the same items only; other items with the key are refused).
CREATE OR REPLACE FUNCTION sqlgroup.publish_many(
  topic text, keys text[], payloads bytea[], delay interval,
  idempotency_key text)
RETURNS SETOF uuid
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT sqlgroup.publish_items(
    topic, keys, payloads,
    array_fill(delay, ARRAY[coalesce(cardinality(keys), 0)]),
    idempotency_key)
$$;

-- Deletes the record of the publish with idempotency `idempotency_key`:
-- nobody will retry it (a Producer forgets its previous batch's key in
-- the next batch's transaction, keeping one key, not one per batch).
CREATE OR REPLACE FUNCTION sqlgroup.forget_publish_key(topic text,
                                                       idempotency_key text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  PERFORM sqlgroup.require_grant('publisher', forget_publish_key.topic);
  DELETE FROM sqlgroup.publish_keys k
   WHERE k.topic = forget_publish_key.topic
     AND k.idempotency_key = forget_publish_key.idempotency_key;
END
$$;

-- Claims `idempotency_key` for a publish of the caller's transaction
-- before anything else is written (a producer that also writes a tally of
-- what it sent), forgetting `previous_key`: false when the topic has seen
-- it (an earlier try committed: send nothing). The publish itself then
-- runs without a key. A key claimed here answers a later publish with the
-- same key as one used for other items.
CREATE OR REPLACE FUNCTION sqlgroup.claim_publish_key(
  topic text, idempotency_key text, previous_key text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  PERFORM sqlgroup.require_grant('publisher', claim_publish_key.topic);
  -- Seen already: answered whoever reads the topic now.
  IF EXISTS (SELECT 1 FROM sqlgroup.publish_keys k
              WHERE k.topic = claim_publish_key.topic
                AND k.idempotency_key = claim_publish_key.idempotency_key) THEN
    RETURN false;
  END IF;
  -- The topic's lock first, as a publish takes it.
  PERFORM sqlgroup.topic_subscribers(claim_publish_key.topic,
                                     'sqlgroup.claim_publish_key');
  IF claim_publish_key.previous_key IS NOT NULL THEN
    DELETE FROM sqlgroup.publish_keys k
     WHERE k.topic = claim_publish_key.topic
       AND k.idempotency_key = claim_publish_key.previous_key;
  END IF;
  INSERT INTO sqlgroup.publish_keys (topic, idempotency_key, ids, fingerprint)
  VALUES (claim_publish_key.topic, claim_publish_key.idempotency_key, '{}',
          '\x')
  ON CONFLICT DO NOTHING;
  RETURN FOUND;
END
$$;

-- One item: its id.
CREATE OR REPLACE FUNCTION sqlgroup.publish(
  topic text, key text, payload bytea, delay interval DEFAULT interval '0')
RETURNS uuid
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT sqlgroup.publish_many(topic, ARRAY[key], ARRAY[payload], delay)
$$;

CREATE OR REPLACE FUNCTION sqlgroup.publish(
  topic text, key text, payload bytea, delay interval, idempotency_key text)
RETURNS uuid
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT sqlgroup.publish_many(topic, ARRAY[key], ARRAY[payload], delay,
                               idempotency_key)
$$;

-- Sets the topics `role_name` may publish to (patterns as a group's; none:
-- no topic), replacing those it had. No policy: the publish functions run
-- as the schema's owner and check the grant (require_grant).
CREATE OR REPLACE FUNCTION sqlgroup.grant_topics(role_name name,
                                                 patterns text[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v_role oid := (SELECT r.oid FROM pg_roles r
                  WHERE r.rolname = grant_topics.role_name);
BEGIN
  IF v_role IS NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'undefined_object',
      MESSAGE = format('role %s does not exist', role_name);
  END IF;
  DELETE FROM sqlgroup.group_grants g
   WHERE g.role_id = v_role AND g.kind = 'publisher';
  INSERT INTO sqlgroup.group_grants (role_id, kind, group_pattern)
  SELECT v_role, 'publisher', p FROM unnest(patterns) p
  ON CONFLICT DO NOTHING;
END
$$;

-- Publishing is the producers' (sql/grants/producer.sql), checked per
-- topic; the administration of topics stays with the schema's owner.
REVOKE ALL ON FUNCTION sqlgroup.publish(text, text, bytea, interval),
                       sqlgroup.publish(text, text, bytea, interval, text),
                       sqlgroup.publish_many(text, text[], bytea[], interval),
                       sqlgroup.publish_many(text, text[], bytea[], interval,
                                             text),
                       sqlgroup.forget_publish_key(text, text),
                       sqlgroup.claim_publish_key(text, text, text),
                       sqlgroup.grant_topics(name, text[]),
                       sqlgroup.topic_create(text),
                       sqlgroup.topic_published(text),
                       sqlgroup.topic_delete(text),
                       sqlgroup.subscribe(text, text),
                       sqlgroup.topic_subscribers(text, text),
                       sqlgroup.check_published_items(text[], bytea[],
                                                      interval[]),
                       sqlgroup.publish_items(text, text[], bytea[],
                                              interval[], text),
                       sqlgroup.new_item_ids(text[], integer, text[])
  FROM PUBLIC;
