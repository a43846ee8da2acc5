-- sqlgroup schema version 16: an idempotency key used again with other
-- items is refused (issue 41).
-- members-from: 15
--
-- Until now the second enqueue with a key added nothing and returned the
-- first one's ids whatever its items were: a caller that reused a request
-- id by mistake lost its items without a word. A key is now recorded with
-- a fingerprint of its items (SHA-256 of each item's key, payload and
-- delay, in order), and an enqueue with the key and other items fails
-- with SQLSTATE 22023 and a sentence, adding nothing. The same items again
-- (the retry the key exists for) still add nothing and return the ids.
--
-- Expand: members and producers of 0.15 call the claim without a
-- fingerprint and are served as before (their keys are not checked).
ALTER TABLE sqlgroup.enqueue_keys ADD COLUMN IF NOT EXISTS fingerprint bytea;
COMMENT ON COLUMN sqlgroup.enqueue_keys.fingerprint IS
  'SHA-256 of the items first enqueued with the key '
  '(sqlgroup.enqueue_fingerprint); NULL for keys of producers before 0.16, '
  'which are not checked.';

-- The fingerprint of items as enqueued: for each, in order, 0x00 for no key
-- or 0x01, the length (int4) and the UTF-8 bytes of the key; the length and
-- bytes of the payload; the delay in microseconds (int8). The C++ Producer
-- computes the same bytes (src/enqueue_fingerprint.cc).
CREATE OR REPLACE FUNCTION sqlgroup.enqueue_fingerprint(
    keys text[], payloads bytea[], delays_us bigint[])
  RETURNS bytea
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  SET search_path = pg_catalog, pg_temp
AS $fn$
  SELECT sha256(coalesce(string_agg(
           CASE WHEN t.k IS NULL THEN '\x00'::bytea
                ELSE '\x01'::bytea || int4send(octet_length(convert_to(t.k, 'UTF8')))
                     || convert_to(t.k, 'UTF8') END
           || int4send(octet_length(t.p)) || t.p
           || int8send(coalesce(t.d, 0)),
           ''::bytea ORDER BY t.n), ''::bytea))
    FROM unnest(keys, payloads, delays_us) WITH ORDINALITY AS t(k, p, d, n)
$fn$;

-- As the 4-argument claim, and with the fingerprint of the items: when the
-- key was claimed before with another fingerprint, fails (22023) instead
-- of answering false.
CREATE OR REPLACE FUNCTION sqlgroup.claim_enqueue_key(
    group_name text, idempotency_key text, ids uuid[], previous_key text,
    fingerprint bytea)
  RETURNS boolean
  LANGUAGE plpgsql VOLATILE SECURITY DEFINER
  SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
  v_claimed integer;
  v_first bytea;
  v_at timestamptz;
  v_count integer;
BEGIN
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
  INSERT INTO sqlgroup.enqueue_keys (group_name, idempotency_key, ids,
                                     fingerprint)
  VALUES (claim_enqueue_key.group_name, claim_enqueue_key.idempotency_key,
          claim_enqueue_key.ids, claim_enqueue_key.fingerprint)
  ON CONFLICT DO NOTHING;
  GET DIAGNOSTICS v_claimed = ROW_COUNT;
  IF v_claimed = 1 THEN
    RETURN true;
  END IF;
  SELECT k.fingerprint, k.created_at, cardinality(k.ids)
    INTO v_first, v_at, v_count
    FROM sqlgroup.enqueue_keys k
   WHERE k.group_name = claim_enqueue_key.group_name
     AND k.idempotency_key = claim_enqueue_key.idempotency_key;
  IF v_first IS DISTINCT FROM claim_enqueue_key.fingerprint
     AND v_first IS NOT NULL AND claim_enqueue_key.fingerprint IS NOT NULL THEN
    RAISE EXCEPTION 'idempotency key "%" of group % was used at % for other items (% of them): an enqueue with a key it has seen adds nothing, and returns the first one''s ids only for the same items; nothing was enqueued',
      claim_enqueue_key.idempotency_key, claim_enqueue_key.group_name,
      v_at, v_count
      USING ERRCODE = '22023',
            HINT = 'Give these items a key of their own (a key names one request); keys are kept 24 hours.';
  END IF;
  RETURN false;
END
$fn$;

-- The claim without a fingerprint (producers of 0.15): the same, checking
-- nothing, so the claim's logic is written once.
CREATE OR REPLACE FUNCTION sqlgroup.claim_enqueue_key(
    group_name text, idempotency_key text, ids uuid[],
    previous_key text DEFAULT NULL)
  RETURNS boolean
  LANGUAGE sql VOLATILE SECURITY DEFINER
  SET search_path = pg_catalog, pg_temp
AS $fn$
  SELECT sqlgroup.claim_enqueue_key(group_name, idempotency_key, ids,
                                    previous_key, NULL::bytea)
$fn$;

-- The bulk enqueue with an idempotency key now records and checks the
-- items' fingerprint.
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
    IF NOT sqlgroup.claim_enqueue_key(
             enqueue_many.group_name, enqueue_many.idempotency_key,
             '{}'::uuid[], NULL,
             sqlgroup.enqueue_fingerprint(
               enqueue_many.keys, enqueue_many.payloads,
               array_fill((extract(epoch FROM coalesce(enqueue_many.delay,
                                                       '0'))
                           * 1000000)::bigint,
                          ARRAY[coalesce(cardinality(enqueue_many.payloads), 0)]))) THEN
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

REVOKE ALL ON FUNCTION sqlgroup.enqueue_fingerprint(text[], bytea[], bigint[])
  FROM PUBLIC;
REVOKE ALL ON FUNCTION
  sqlgroup.claim_enqueue_key(text, text, uuid[], text, bytea) FROM PUBLIC;
