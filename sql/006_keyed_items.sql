-- sqlgroup schema version 6: keyed items, enqueueing from plain SQL, and
-- an index of the keys blocked behind a retry.
--
-- A group's `ordering` says what a key means to its members: 'key' (the
-- default) hands the items of one key out in enqueue order, one at a time;
-- 'none' places them together (affinity) and nothing more.
--
-- An item with a key is placed by a fixed hash of the key, so every item
-- of a key falls in one part for every part count P (1..4096) and a change
-- of P keeps each key inside one range. The 128-bit id space is cut into
-- 2^64 blocks of 2^64 ids; block b holds [b*2^64, (b+1)*2^64). A key's
-- block is the first 8 bytes (big-endian) of the md5 of the key's bytes,
-- or the next block when that one is split by a part boundary (see
-- block_is_split); its items' ids are
--   (block << 64) | (unix microseconds, 52 bits) << 12 | (12 random bits)
-- with the time never below that of the key's newest item plus one, so
-- later enqueues of a key sort after earlier ones. Unkeyed items are laid
-- out as the C++ producer lays them (src/item_ids.cc). The C++ side of the
-- placement is src/key_placement.cc; the two must agree bit for bit
-- (tests/integration/enqueue_function_test.cc checks it).
--
-- sqlgroup.enqueue(group, key, payload [, delay]) and its bulk form
-- sqlgroup.enqueue_many(group, keys, payloads [, delay])
-- (docs/ENQUEUE_SQL.md) let any client enqueue with one SQL call. They run
-- as this schema's owner (SECURITY DEFINER, a fixed search_path): a
-- producer role needs EXECUTE on them (sql/grants/producer.sql), not the
-- INSERT on sqlgroup.items the C++ producer uses. These functions are
-- PostgreSQL's (PL/pgSQL, pg_notify), outside what CockroachDB shares;
-- the members and the C++ producer do not depend on them.

ALTER TABLE sqlgroup.groups
  ADD COLUMN IF NOT EXISTS ordering text NOT NULL DEFAULT 'key'
    CONSTRAINT groups_ordering_valid CHECK (ordering IN ('key', 'none'));

-- Keys blocked behind a retry, cheap to count at any backlog. Under
-- ordering 'key' a key is blocked while its head waits for a retry: the
-- head failed (attempts > 0) and is not due yet (not_before in the
-- future), so its later items wait behind it. Members count them per
-- owned part with the lag (sqlgroup_part_blocked_keys,
-- sqlgroup_part_oldest_blocked_seconds) and `group describe` shows them;
-- both walk this index over a part's key range, so the cost is that of
-- the items that failed, not of the backlog. Partial: only keyed items
-- that failed at least once have an entry (an unkeyed item holds back no
-- key). Its key is (group_name, id) for the part's range; not_before and
-- enqueued_at are read from the row, not INCLUDEd: a column in an index
-- makes every update of it a non-HOT one, and not_before changes on
-- every release, also after a transient conflict (no attempt counted),
-- which stays HOT without it. A failure's release changes attempts, named
-- by the predicate, so it is no longer HOT: it also enters the primary
-- key and items_waiting_since (10,000 failure releases, one statement
-- each, took 31-36 us each without this index and 76-104 us with it;
-- a failed item then waits for its backoff anyway).
CREATE INDEX IF NOT EXISTS items_retrying ON sqlgroup.items (group_name, id)
  WHERE attempts > 0 AND key IS NOT NULL;

-- Whether block `block` (0 <= block < 2^64) has a part boundary
-- floor(p * 2^128 / P) (2 <= P <= 4096, 1 <= p < P) strictly inside it.
-- With N = 2^64 and g = (N - block) mod N that is: some P <= 4096 has
-- 0 < (g * P mod N) < P, i.e. 0 < g/N - p/P < 1/N for some p. Such a p/P
-- (reduced) is within 1/(2 P^2) of g/N, so by Legendre's theorem it is a
-- convergent p_k/q_k of g/N's continued fraction, one below g/N (k even).
-- Euclid on (N, g) yields the convergents' denominators q_k and the
-- remainders r_(k+1) = |q_k * g - p_k * N|, so the test is: some even k
-- with q_k <= 4096 has 0 < r_(k+1) < q_k (a handful of steps).
-- Neighbouring blocks of a split block are never split (two boundaries
-- are at least 2^128/4096^2 apart), nor is the last block.
-- Operators resolve through the caller's search_path; the one caller,
-- sqlgroup.enqueue, fixes it to pg_catalog (a SET clause here would cost
-- every call).
CREATE OR REPLACE FUNCTION sqlgroup.block_is_split(block numeric)
  RETURNS boolean
  LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $fn$
DECLARE
  x  numeric := 18446744073709551616;  -- N = 2^64
  y  numeric;                          -- g, then the remainders
  a  numeric;
  r  numeric;
  q  numeric;
  q1 numeric := 1;  -- q_0 (the convergent 0/1; g < N)
  q2 numeric := 0;  -- q_-1
BEGIN
  IF block < 0 OR block >= x OR block <> trunc(block) THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
      MESSAGE = format('sqlgroup.block_is_split: %s is not a block number; '
                       'pass an integer in [0, 2^64)', block);
  END IF;
  y := mod(x - block, x);
  -- Two steps a turn: k odd (a convergent above g/N: nothing to test),
  -- then k even.
  WHILE y > 0 LOOP
    a := div(x, y);
    q := a * q1 + q2;
    EXIT WHEN q > 4096;
    r := x - a * y;
    x := y;
    y := r;
    q2 := q1;
    q1 := q;
    EXIT WHEN y = 0;
    a := div(x, y);
    q := a * q1 + q2;
    EXIT WHEN q > 4096;
    r := x - a * y;
    IF r > 0 AND r < q THEN
      RETURN true;
    END IF;
    x := y;
    y := r;
    q2 := q1;
    q1 := q;
  END LOOP;
  RETURN false;
END
$fn$;

-- The block of `key`'s items (0 <= block < 2^64, as numeric). md5(text)
-- hashes the text's bytes in the database encoding: in a UTF-8 database
-- (sqlgroup's clusters are) that is the key's UTF-8 bytes, the bytes the
-- C++ producer hashes. Another encoding places non-ASCII keys elsewhere.
CREATE OR REPLACE FUNCTION sqlgroup.key_block(key text)
  RETURNS numeric
  LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $fn$
DECLARE
  h numeric := ('x' || substr(md5(key), 1, 16))::bit(64)::bigint;
BEGIN
  IF h < 0 THEN
    h := h + 18446744073709551616;  -- unsigned
  END IF;
  IF sqlgroup.block_is_split(h) THEN
    RETURN h + 1;  -- never past the top: the last block is never split
  END IF;
  RETURN h;
END
$fn$;

-- Small pieces of the id layout, shared by both enqueue forms. The SQL
-- ones are inlined into their callers' statements (hence not STRICT).

-- The uuid whose high and low 64 bits are `hi` and `lo` (two's
-- complement: -1 is all ones).
CREATE OR REPLACE FUNCTION sqlgroup.id_of(hi bigint, lo bigint)
  RETURNS uuid
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $fn$
  SELECT (lpad(to_hex(hi), 16, '0') || lpad(to_hex(lo), 16, '0'))::uuid
$fn$;

-- `v` (0 <= v < 2^64) as the bigint with the same 64 bits.
CREATE OR REPLACE FUNCTION sqlgroup.signed64(v numeric)
  RETURNS bigint
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $fn$
  SELECT (CASE WHEN v >= 9223372036854775808
               THEN v - 18446744073709551616 ELSE v END)::bigint
$fn$;

-- A new id in the block whose signed64 is `hi`, at `micros`:
-- (block << 64) | (min(micros, 2^52 - 1) << 12) | (12 random bits).
CREATE OR REPLACE FUNCTION sqlgroup.keyed_id(hi bigint, micros bigint)
  RETURNS uuid
  LANGUAGE sql VOLATILE PARALLEL RESTRICTED  -- random()
AS $fn$
  SELECT sqlgroup.id_of(hi, (least(micros, 4503599627370495) << 12)
                            | floor(random() * 4096)::bigint)
$fn$;

-- The time of keyed id `id` (its bits 12..63).
CREATE OR REPLACE FUNCTION sqlgroup.id_time(id uuid)
  RETURNS bigint
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $fn$
  SELECT (('x' || right(replace(id::text, '-', ''), 16))::bit(64)::bigint
          >> 12) & 4503599627370495
$fn$;

-- `id` with fresh random low 12 bits: the noise of a keyed id, and part
-- of an unkeyed one's. The time above them, and so the order, stays.
CREATE OR REPLACE FUNCTION sqlgroup.with_fresh_noise(id uuid)
  RETURNS uuid
  LANGUAGE sql VOLATILE PARALLEL RESTRICTED  -- random()
AS $fn$
  SELECT (left(id::text, 33)
          || lpad(to_hex(floor(random() * 4096)::integer), 3, '0'))::uuid
$fn$;

-- The earliest time the next item of block `hi` (signed64) may take in
-- group `group_name`: one past the newest keyed item in the block (one
-- probe down the primary key), or 0. An unkeyed item that happens to fall
-- in the block carries no time of the block's keys and is passed over.
CREATE OR REPLACE FUNCTION sqlgroup.block_next_time(group_name text,
                                                    hi bigint)
  RETURNS bigint
  LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $fn$
#variable_conflict use_column
BEGIN
  RETURN coalesce((
    SELECT sqlgroup.id_time(i.id) + 1
      FROM sqlgroup.items i
      WHERE i.group_name = block_next_time.group_name
        AND i.id BETWEEN sqlgroup.id_of(block_next_time.hi, 0)
                     AND sqlgroup.id_of(block_next_time.hi, -1)
        AND i.key IS NOT NULL
      ORDER BY i.id DESC LIMIT 1), 0);
END
$fn$;

-- A new unkeyed id in part `part` of `parts` at `micros`, as
-- src/item_ids.cc's ItemId lays it out: the part's start plus
-- (min(micros, 2^52 - 1) << k | k random bits), where
-- k = floor(log2(part size - 1)) - 52 = 76 - bitlength(parts), the same
-- for every part of a group (63 at 4096 parts, 75 at one).
CREATE OR REPLACE FUNCTION sqlgroup.unkeyed_id(part integer, parts integer,
                                               micros bigint)
  RETURNS uuid
  LANGUAGE plpgsql VOLATILE PARALLEL RESTRICTED  -- random()
AS $fn$
DECLARE
  two64 constant numeric := 18446744073709551616;
  span  constant numeric :=
    power(2::numeric, 76 - length(ltrim(parts::bit(13)::text, '0')));
  v numeric :=
    div(part * 340282366920938463463374607431768211456, parts)  -- 2^128
    + least(micros, 4503599627370495) * span
    + mod(floor(random() * 4294967296)::numeric * two64
          + floor(random() * 4294967296)::numeric * 4294967296
          + floor(random() * 4294967296)::numeric, span);
BEGIN
  RETURN sqlgroup.id_of(sqlgroup.signed64(div(v, two64)),
                        sqlgroup.signed64(mod(v, two64)));
END
$fn$;

-- Tells the members of `group_name` that items arrived, as the C++
-- producer does (store::ItemsArrived, store::ItemsDueIn): "items:G" for
-- items due now, "items:G@<delay in whole microseconds>" for delayed ones.
-- PostgreSQL folds identical notifications of a transaction into one.
CREATE OR REPLACE FUNCTION sqlgroup.announce_items(group_name text,
                                                   delay interval)
  RETURNS void
  LANGUAGE plpgsql VOLATILE
AS $fn$
BEGIN
  IF delay > interval '0' THEN
    PERFORM pg_notify('sqlgroup', 'items:' || group_name || '@'
                      || trunc(extract(epoch FROM delay) * 1000000)::bigint);
  ELSE
    PERFORM pg_notify('sqlgroup', 'items:' || group_name);
  END IF;
END
$fn$;

-- Enqueues payloads[i] with keys[i] (NULL: unkeyed) into group
-- `group_name`, due after `delay`, and returns the new ids in array order.
-- The items of one key get increasing ids in array order, after every
-- item of that key enqueued before (by earlier calls, transactions, or
-- this transaction). Announces the items on channel 'sqlgroup' as the C++
-- producer does; a transaction of many calls sends one notification.
-- Errors (nothing is enqueued):
--   22004 null_value_not_allowed: group_name, keys, payloads, delay or a
--         payload is NULL;
--   42704 undefined_object: no such group;
--   22023 invalid_parameter_value: arrays of different lengths, a payload
--         over 1 MiB (1048576 bytes), a negative delay.
CREATE OR REPLACE FUNCTION sqlgroup.enqueue_many(
    group_name text, keys text[], payloads bytea[],
    delay interval DEFAULT '0')
  RETURNS SETOF uuid
  LANGUAGE plpgsql VOLATILE SECURITY DEFINER
  SET search_path = pg_catalog, pg_temp
  -- A custom plan of the statements below costs milliseconds to plan,
  -- every call; the generic one serves every array size.
  SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
  max_payload constant integer := 1048576;  -- ProducerOptions' default
  v_parts      integer;
  v_count      integer;
  v_bad        record;
  v_now        bigint;
  v_not_before timestamptz;
  v_first_part integer;
  v_run        integer;
  v_ids        uuid[];
  v_got        uuid[];
  v_pending    bigint[];  -- ordinals still to insert; NULL: all
  v_done       integer := 0;
  v_tries      integer := 0;
BEGIN
  IF enqueue_many.group_name IS NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed',
      MESSAGE = 'sqlgroup.enqueue: the group name is NULL; pass the name '
                'of a consumer group (`sqlgroup group list` shows them); '
                'nothing was enqueued';
  END IF;
  IF enqueue_many.keys IS NULL OR enqueue_many.payloads IS NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed',
      MESSAGE = 'sqlgroup.enqueue: keys or payloads is NULL; pass two '
                'arrays of one element per item (a NULL key makes an '
                'unkeyed item); nothing was enqueued';
  END IF;
  IF enqueue_many.delay IS NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed',
      MESSAGE = 'sqlgroup.enqueue: the delay is NULL; pass interval ''0'' '
                '(or leave it out) for items due now; nothing was enqueued';
  END IF;
  IF enqueue_many.delay < interval '0' THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
      MESSAGE = format('sqlgroup.enqueue: the delay %s is negative; pass '
                       'interval ''0'' for items due now, or a positive '
                       'delay; nothing was enqueued', enqueue_many.delay);
  END IF;
  v_count := cardinality(enqueue_many.keys);
  IF v_count <> cardinality(enqueue_many.payloads) THEN
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
      MESSAGE = format('sqlgroup.enqueue: keys has %s elements and '
                       'payloads %s; pass one key (or NULL) per payload; '
                       'nothing was enqueued',
                       v_count, cardinality(enqueue_many.payloads));
  END IF;
  SELECT g.parts INTO v_parts
    FROM sqlgroup.groups g WHERE g.name = enqueue_many.group_name;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'undefined_object',
      MESSAGE = format('sqlgroup.enqueue: consumer group %L does not exist; '
                       'create it with `sqlgroup group create %s --parts P` '
                       '(see `sqlgroup group list`); nothing was enqueued',
                       enqueue_many.group_name, enqueue_many.group_name);
  END IF;
  SELECT t.ord, octet_length(t.p) AS size INTO v_bad
    FROM unnest(enqueue_many.payloads) WITH ORDINALITY AS t(p, ord)
    WHERE t.p IS NULL OR octet_length(t.p) > max_payload
    ORDER BY t.ord LIMIT 1;
  IF FOUND THEN
    IF v_bad.size IS NULL THEN
      RAISE EXCEPTION USING ERRCODE = 'null_value_not_allowed',
        MESSAGE = format('sqlgroup.enqueue: the payload of item %s is NULL; '
                         'pass ''''::bytea for an empty one; nothing was '
                         'enqueued', v_bad.ord);
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
      MESSAGE = format('sqlgroup.enqueue: item %s has a payload of %s bytes, '
                       'more than the limit of %s; store large data '
                       'elsewhere and enqueue a reference to it; nothing '
                       'was enqueued', v_bad.ord, v_bad.size, max_payload);
  END IF;
  IF v_count = 0 THEN
    RETURN;
  END IF;

  v_now := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
  v_not_before := CASE WHEN enqueue_many.delay > interval '0'
                       THEN clock_timestamp() + enqueue_many.delay
                       ELSE '-infinity' END;
  -- Unkeyed items as src/item_ids.cc deals them: to successive parts from
  -- a random one, in runs of count / parts (1 to 64), each item its own
  -- microsecond. Keyed ones: each block's items from the block's next
  -- time on, one microsecond apart in array order.
  v_first_part := floor(random() * v_parts)::integer;
  v_run := least(greatest(v_count / v_parts, 1), 64);
  WITH u AS MATERIALIZED (
    SELECT t.ord, sqlgroup.key_block(t.k) AS block
      FROM unnest(enqueue_many.keys) WITH ORDINALITY AS t(k, ord)
  ), r AS (
    SELECT u.ord, u.block,
           row_number() OVER (PARTITION BY u.block ORDER BY u.ord) - 1 AS rank
      FROM u
  ), b AS (
    SELECT d.block, d.hi,
           greatest(v_now, sqlgroup.block_next_time(enqueue_many.group_name, d.hi))
             AS base
      FROM (SELECT DISTINCT u.block, sqlgroup.signed64(u.block) AS hi
              FROM u WHERE u.block IS NOT NULL) d
  )
  SELECT array_agg(
           CASE WHEN r.block IS NULL
             THEN sqlgroup.unkeyed_id(
                    ((v_first_part + r.rank / v_run) % v_parts)::integer,
                    v_parts, v_now + r.rank)
             ELSE sqlgroup.keyed_id(b.hi, b.base + r.rank)
           END ORDER BY r.ord)
    INTO v_ids
    FROM r LEFT JOIN b ON b.block = r.block;

  -- Two producers may pick the same id (one key, one microsecond, the
  -- same 12 bits): the later insert skips it (no subtransaction, which a
  -- transaction of thousands of calls could not afford) and that item
  -- tries again with fresh low bits, keeping its time and so its order.
  LOOP
    WITH ins AS (
      INSERT INTO sqlgroup.items (group_name, id, key, payload, not_before)
      SELECT enqueue_many.group_name, t.id, t.k, t.p, v_not_before
        FROM unnest(v_ids, enqueue_many.keys, enqueue_many.payloads)
               WITH ORDINALITY AS t(id, k, p, ord)
        WHERE v_pending IS NULL OR t.ord = ANY (v_pending)
      ON CONFLICT (group_name, id) DO NOTHING
      RETURNING id)
    SELECT array_agg(ins.id) INTO v_got FROM ins;
    v_done := v_done + coalesce(cardinality(v_got), 0);
    EXIT WHEN v_done = v_count;
    v_tries := v_tries + 1;
    IF v_tries > 100 THEN
      RAISE EXCEPTION USING ERRCODE = 'unique_violation',
        MESSAGE = 'sqlgroup.enqueue: found no free id after 100 tries; '
                  'this should not happen, please report it; nothing was '
                  'enqueued';
    END IF;
    SELECT array_agg(t.ord) INTO v_pending
      FROM unnest(v_ids) WITH ORDINALITY AS t(id, ord)
      WHERE (v_pending IS NULL OR t.ord = ANY (v_pending))
        AND t.id <> ALL (coalesce(v_got, '{}'));
    SELECT array_agg(CASE WHEN t.ord = ANY (v_pending)
                          THEN sqlgroup.with_fresh_noise(t.id)
                          ELSE t.id END ORDER BY t.ord)
      INTO v_ids
      FROM unnest(v_ids) WITH ORDINALITY AS t(id, ord);
  END LOOP;

  PERFORM sqlgroup.announce_items(enqueue_many.group_name, enqueue_many.delay);
  RETURN QUERY SELECT t.id FROM unnest(v_ids) WITH ORDINALITY AS t(id, ord)
               ORDER BY t.ord;
END
$fn$;

-- One item: the bulk form with one element, with the same errors (bad
-- input goes to the bulk form, which words them), on a short path of its
-- own that costs less than half of the bulk form's for one item.
CREATE OR REPLACE FUNCTION sqlgroup.enqueue(
    group_name text, key text, payload bytea, delay interval DEFAULT '0')
  RETURNS uuid
  LANGUAGE plpgsql VOLATILE SECURITY DEFINER
  SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
  v_parts integer;
  v_now   bigint;
  v_hi    bigint;
  v_id    uuid;
  v_tries integer := 0;
BEGIN
  IF enqueue.group_name IS NOT NULL AND enqueue.payload IS NOT NULL
     AND octet_length(enqueue.payload) <= 1048576
     AND enqueue.delay >= interval '0' THEN
    SELECT g.parts INTO v_parts
      FROM sqlgroup.groups g WHERE g.name = enqueue.group_name;
  END IF;
  IF v_parts IS NULL THEN
    RETURN (SELECT sqlgroup.enqueue_many(enqueue.group_name,
                                         ARRAY[enqueue.key],
                                         ARRAY[enqueue.payload],
                                         enqueue.delay));
  END IF;
  v_now := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
  IF enqueue.key IS NULL THEN
    v_id := sqlgroup.unkeyed_id(floor(random() * v_parts)::integer, v_parts,
                                v_now);
  ELSE
    v_hi := sqlgroup.signed64(sqlgroup.key_block(enqueue.key));
    v_id := sqlgroup.keyed_id(v_hi, greatest(v_now,
              sqlgroup.block_next_time(enqueue.group_name, v_hi)));
  END IF;
  LOOP  -- as in the bulk form
    INSERT INTO sqlgroup.items (group_name, id, key, payload, not_before)
    VALUES (enqueue.group_name, v_id, enqueue.key, enqueue.payload,
            CASE WHEN enqueue.delay > interval '0'
                 THEN clock_timestamp() + enqueue.delay
                 ELSE '-infinity' END)
    ON CONFLICT (group_name, id) DO NOTHING;
    EXIT WHEN FOUND;
    v_tries := v_tries + 1;
    IF v_tries > 100 THEN
      RAISE EXCEPTION USING ERRCODE = 'unique_violation',
        MESSAGE = 'sqlgroup.enqueue: found no free id after 100 tries; '
                  'this should not happen, please report it; nothing was '
                  'enqueued';
    END IF;
    v_id := sqlgroup.with_fresh_noise(v_id);
  END LOOP;
  PERFORM sqlgroup.announce_items(enqueue.group_name, enqueue.delay);
  RETURN v_id;
END
$fn$;

-- Nobody but the schema's owner and the roles granted by
-- sql/grants/producer.sql (the two enqueue functions, which run the
-- helpers as the owner).
REVOKE ALL ON FUNCTION sqlgroup.block_is_split(numeric) FROM PUBLIC;
REVOKE ALL ON FUNCTION sqlgroup.key_block(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION sqlgroup.id_of(bigint, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION sqlgroup.signed64(numeric) FROM PUBLIC;
REVOKE ALL ON FUNCTION sqlgroup.keyed_id(bigint, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION sqlgroup.id_time(uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION sqlgroup.with_fresh_noise(uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION sqlgroup.block_next_time(text, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION sqlgroup.unkeyed_id(integer, integer, bigint)
  FROM PUBLIC;
REVOKE ALL ON FUNCTION sqlgroup.announce_items(text, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION sqlgroup.enqueue_many(text, text[], bytea[], interval)
  FROM PUBLIC;
REVOKE ALL ON FUNCTION sqlgroup.enqueue(text, text, bytea, interval)
  FROM PUBLIC;
