-- sqlgroup schema version 10: enqueues that a retry never duplicates
-- (issue 23).
--
-- An enqueue may carry an idempotency key. The first enqueue with a key
-- records it with the ids of its items, in the same transaction as the
-- items; a later enqueue with the same key in the same group adds nothing
-- and returns those ids, whether or not the items were consumed since. So
-- a producer that lost its connection during COMMIT (and cannot know
-- whether the batch committed) sends it again with the same key.
--
-- Keys are kept 24 hours (any enqueue with a key deletes a few expired
-- ones). A Producer numbers its batches and keys each one
-- 'producer:<its id>:<batch>'; it deletes its previous batch's key in the
-- transaction of the next one (only the newest batch can be in doubt), so
-- a running producer keeps one row here.
CREATE TABLE IF NOT EXISTS sqlgroup.enqueue_keys (
  group_name      text        NOT NULL
    REFERENCES sqlgroup.groups (name) ON DELETE CASCADE,
  idempotency_key text        NOT NULL,
  ids             uuid[]      NOT NULL,
  created_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (group_name, idempotency_key)
);
CREATE INDEX IF NOT EXISTS enqueue_keys_created_at
  ON sqlgroup.enqueue_keys (created_at);

-- How long a key is remembered.
CREATE OR REPLACE FUNCTION sqlgroup.idempotency_retention()
  RETURNS interval LANGUAGE sql IMMUTABLE AS $$ SELECT interval '24 hours' $$;

-- Claims `idempotency_key` for `ids`: true when the key is new (the caller
-- then inserts the items), false when an enqueue with it committed before
-- (the caller inserts nothing and returns sqlgroup.enqueue_keys.ids). A
-- concurrent enqueue with the key makes this wait until it ends. Also
-- deletes `previous_key` (a Producer's last batch) and a few expired keys.
CREATE OR REPLACE FUNCTION sqlgroup.claim_enqueue_key(
    group_name text, idempotency_key text, ids uuid[],
    previous_key text DEFAULT NULL)
  RETURNS boolean
  LANGUAGE plpgsql VOLATILE SECURITY DEFINER
  SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
  v_claimed integer;
BEGIN
  -- SKIP LOCKED: concurrent enqueues sweep different rows instead of
  -- queueing behind one another on the oldest.
  DELETE FROM sqlgroup.enqueue_keys k
   WHERE k.ctid = ANY (ARRAY(
     SELECT e.ctid FROM sqlgroup.enqueue_keys e
      WHERE e.created_at < now() - sqlgroup.idempotency_retention()
      LIMIT 8 FOR UPDATE SKIP LOCKED));
  IF claim_enqueue_key.previous_key IS NOT NULL THEN
    DELETE FROM sqlgroup.enqueue_keys k
     WHERE k.group_name = claim_enqueue_key.group_name
       AND k.idempotency_key = claim_enqueue_key.previous_key;
  END IF;
  INSERT INTO sqlgroup.enqueue_keys (group_name, idempotency_key, ids)
  VALUES (claim_enqueue_key.group_name, claim_enqueue_key.idempotency_key,
          claim_enqueue_key.ids)
  ON CONFLICT DO NOTHING;
  GET DIAGNOSTICS v_claimed = ROW_COUNT;
  RETURN v_claimed = 1;
END
$fn$;

-- Forgets a key (a Producer's last batch when it goes away).
CREATE OR REPLACE FUNCTION sqlgroup.forget_enqueue_key(
    group_name text, idempotency_key text)
  RETURNS void
  LANGUAGE sql VOLATILE SECURITY DEFINER
  SET search_path = pg_catalog, pg_temp
AS $fn$
  DELETE FROM sqlgroup.enqueue_keys k
   WHERE k.group_name = forget_enqueue_key.group_name
     AND k.idempotency_key = forget_enqueue_key.idempotency_key
$fn$;

-- The bulk enqueue with an idempotency key (NULL: none). Returns the ids
-- of the items, the first call's on a repeat.
CREATE OR REPLACE FUNCTION sqlgroup.enqueue_many(
    group_name text, keys text[], payloads bytea[], delay interval,
    idempotency_key text)
  RETURNS SETOF uuid
  LANGUAGE plpgsql VOLATILE SECURITY DEFINER
  SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
  v_ids uuid[];
BEGIN
  IF enqueue_many.idempotency_key IS NOT NULL THEN
    -- Claimed first, empty: a concurrent call with the key waits here.
    IF NOT sqlgroup.claim_enqueue_key(enqueue_many.group_name,
                                      enqueue_many.idempotency_key,
                                      '{}'::uuid[]) THEN
      RETURN QUERY
        SELECT unnest(k.ids) FROM sqlgroup.enqueue_keys k
         WHERE k.group_name = enqueue_many.group_name
           AND k.idempotency_key = enqueue_many.idempotency_key;
      RETURN;
    END IF;
  END IF;
  v_ids := ARRAY(SELECT sqlgroup.enqueue_many(enqueue_many.group_name,
                                              enqueue_many.keys,
                                              enqueue_many.payloads,
                                              enqueue_many.delay));
  IF enqueue_many.idempotency_key IS NOT NULL THEN
    UPDATE sqlgroup.enqueue_keys k SET ids = v_ids
     WHERE k.group_name = enqueue_many.group_name
       AND k.idempotency_key = enqueue_many.idempotency_key;
  END IF;
  RETURN QUERY SELECT unnest(v_ids);
END
$fn$;

-- One item with an idempotency key (NULL: none).
CREATE OR REPLACE FUNCTION sqlgroup.enqueue(
    group_name text, key text, payload bytea, delay interval,
    idempotency_key text)
  RETURNS uuid
  LANGUAGE sql VOLATILE SECURITY DEFINER
  SET search_path = pg_catalog, pg_temp
AS $fn$
  SELECT sqlgroup.enqueue_many(group_name, ARRAY[key], ARRAY[payload], delay,
                               idempotency_key)
$fn$;

REVOKE ALL ON FUNCTION sqlgroup.idempotency_retention() FROM PUBLIC;
REVOKE ALL ON FUNCTION sqlgroup.claim_enqueue_key(text, text, uuid[], text)
  FROM PUBLIC;
REVOKE ALL ON FUNCTION sqlgroup.forget_enqueue_key(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION
  sqlgroup.enqueue_many(text, text[], bytea[], interval, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION sqlgroup.enqueue(text, text, bytea, interval, text)
  FROM PUBLIC;
