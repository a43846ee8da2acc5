-- What a producer (a Producer, `sqlgroup produce`, or any SQL client
-- calling sqlgroup.enqueue) may do in the sqlgroup schema: read the schema
-- version and the groups, and enqueue items. The C++ producer inserts
-- into sqlgroup.items itself; sqlgroup.enqueue (schema 6) runs as the
-- schema's owner and needs only EXECUTE.
-- Applied like member.sql: `sqlgroup grant --producer_role ROLE [--group
-- G]...`, or psql -v role=ROLE -v groups='{G,...}' -f
-- sql/grants/producer.sql. Only into its groups, and only into a group
-- that exists (schema 19).
GRANT USAGE ON SCHEMA sqlgroup TO :"role";
SELECT sqlgroup.grant_groups('producer', :'role', :'groups');
GRANT EXECUTE ON FUNCTION sqlgroup.require_grant(text, text) TO :"role";
GRANT SELECT ON sqlgroup.schema_migrations, sqlgroup.groups TO :"role";
GRANT INSERT ON sqlgroup.items TO :"role";
GRANT EXECUTE ON FUNCTION
  sqlgroup.enqueue(text, text, bytea, interval),
  sqlgroup.enqueue_many(text, text[], bytea[], interval)
  TO :"role";
-- Idempotency keys (schema 10): the Producer claims its batches' keys
-- through the function (it runs as the owner: expired keys of others are
-- deleted too), with the items' fingerprint from schema 16; the enqueue
-- functions with a key need only EXECUTE.
GRANT EXECUTE ON FUNCTION
  sqlgroup.claim_enqueue_key(text, text, uuid[], text),
  sqlgroup.claim_enqueue_key(text, text, uuid[], text, bytea),
  sqlgroup.forget_enqueue_key(text, text),
  sqlgroup.enqueue(text, text, bytea, interval, text),
  sqlgroup.enqueue_many(text, text[], bytea[], interval, text)
  TO :"role";
GRANT SELECT ON sqlgroup.enqueue_keys TO :"role";
-- Announcements (schema 12): the Producer announces its items through the
-- function the enqueue functions use, which counts them per transaction.
GRANT EXECUTE ON FUNCTION
  sqlgroup.announce_items(text, interval),
  sqlgroup.announce_items(text, interval, uuid[])
  TO :"role";
-- Topics (schema 20): publishing, checked per topic by the functions
-- (`--topic`; sqlgroup.grant_topics records which), and the topics' names,
-- which a Producer checks at its start.
SELECT sqlgroup.grant_topics(:'role', :'topics');
GRANT SELECT ON sqlgroup.topics TO :"role";
GRANT EXECUTE ON FUNCTION
  sqlgroup.publish(text, text, bytea, interval),
  sqlgroup.publish(text, text, bytea, interval, text),
  sqlgroup.publish_many(text, text[], bytea[], interval),
  sqlgroup.publish_many(text, text[], bytea[], interval, text),
  sqlgroup.publish_items(text, text[], bytea[], interval[], text),
  sqlgroup.forget_publish_key(text, text),
  sqlgroup.claim_publish_key(text, text, text)
  TO :"role";
