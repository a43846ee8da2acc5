-- sqlgroup schema version 12: announcements say where the items are
-- (issue 24).
--
-- Until now an enqueue announced "items:G", and every member of the group
-- then probed all of its idle parts: one query per member per
-- announcement, whose cost grows with the parts a member owns. The
-- announcement of items due now now names the first four hex digits of
-- their ids, "items:G#0a1b,ff00" (at most 16 of them), and only the
-- members owning those keys wake, straight into a claim of those parts.
--
-- A transaction sends at most 8 such announcements; after that, and for
-- items over more than 16 prefixes, the plain "items:G" as before (which
-- PostgreSQL folds into one per transaction): a transaction of many
-- enqueues still wakes members a bounded number of times. The count is the
-- transaction-local setting sqlgroup.announced. The C++ producer calls
-- this function too (store::AnnounceItems; sql/grants/producer.sql grants
-- it), so the two kinds of producer count together. Members of schema 11 do not know the new
-- form: restart them after migrating (they find the items by their safety
-- poll meanwhile).
CREATE OR REPLACE FUNCTION sqlgroup.announce_items(group_name text,
                                                   delay interval,
                                                   ids uuid[])
  RETURNS void
  LANGUAGE plpgsql VOLATILE
AS $fn$
DECLARE
  v_sent     integer;
  v_prefixes text[];
BEGIN
  IF delay <= interval '0' THEN
    v_sent := coalesce(nullif(current_setting('sqlgroup.announced', true),
                              ''), '0')::integer;
    IF v_sent < 8 THEN
      v_prefixes := ARRAY(SELECT DISTINCT left(i::text, 4) COLLATE "C"
                            FROM unnest(ids) AS i ORDER BY 1);
      IF cardinality(v_prefixes) BETWEEN 1 AND 16 THEN
        PERFORM pg_notify('sqlgroup', 'items:' || group_name || '#'
                          || array_to_string(v_prefixes, ','));
        PERFORM set_config('sqlgroup.announced', (v_sent + 1)::text, true);
        RETURN;
      END IF;
    END IF;
  END IF;
  PERFORM sqlgroup.announce_items(group_name, delay);
END
$fn$;
REVOKE ALL ON FUNCTION sqlgroup.announce_items(text, interval, uuid[])
  FROM PUBLIC;

-- The two enqueue functions of schema 6 announce with their ids. Their
-- text is schema 6's with that one call changed, so it is patched here
-- rather than repeated (about 150 lines); the SET clauses and grants stay.
DO $do$
DECLARE
  v_fn   regprocedure;
  v_from text;
  v_to   text;
  v_def  text;
BEGIN
  FOR v_fn, v_from, v_to IN VALUES
    ('sqlgroup.enqueue(text, text, bytea, interval)'::regprocedure,
     'sqlgroup.announce_items(enqueue.group_name, enqueue.delay)',
     'sqlgroup.announce_items(enqueue.group_name, enqueue.delay, '
       'ARRAY[v_id])'),
    ('sqlgroup.enqueue_many(text, text[], bytea[], interval)'::regprocedure,
     'sqlgroup.announce_items(enqueue_many.group_name, enqueue_many.delay)',
     'sqlgroup.announce_items(enqueue_many.group_name, enqueue_many.delay, '
       'v_ids)')
  LOOP
    v_def := pg_get_functiondef(v_fn);
    CONTINUE WHEN position(v_to IN v_def) > 0;  -- patched already
    IF position(v_from IN v_def) = 0 THEN
      RAISE EXCEPTION 'schema 12: % does not call %; was it changed by '
        'hand? Restore it from sql/006_keyed_items.sql and migrate again',
        v_fn, v_from;
    END IF;
    EXECUTE replace(v_def, v_from, v_to);
  END LOOP;
END
$do$;
