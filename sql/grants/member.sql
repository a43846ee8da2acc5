-- What a member (a Consumer, `sqlgroup consume`) may do in the sqlgroup
-- schema, and nothing more: read the schema version and its group, keep
-- its own session, take and drop parts, claim, release, acknowledge and
-- dead-letter items, and read lag. No DDL, no TRUNCATE, no change to groups
-- or to the recorded schema version. Foreign-key cascades (reaping a
-- session drops its parts) run as the tables' owner and need no grant
-- here. LISTEN/NOTIFY need none either.
--
-- Applied by `sqlgroup grant --member_role ROLE [--group G]...`
-- (Admin::GrantRoles), which first revokes everything ROLE had on the
-- schema, or by hand: psql -v role=ROLE -v groups='{G,...}' -f
-- sql/grants/member.sql ('{*}': every group). Idempotent; run it again
-- after every migration. The rows of other groups stay invisible and
-- untouchable to ROLE (row-level security, schema 19). A migration that adds a table or a
-- column members write must add its grant here (the integration tests run
-- their members under this role and fail otherwise).
-- Column lists on UPDATE are PostgreSQL's; CockroachDB has table-level
-- UPDATE only.
GRANT USAGE ON SCHEMA sqlgroup TO :"role";
-- Which groups: the policies of row-level security (schema 19).
SELECT sqlgroup.grant_groups('member', :'role', :'groups');
-- To say which grant a refusal lacks.
GRANT EXECUTE ON FUNCTION sqlgroup.require_grant(text, text) TO :"role";
GRANT SELECT ON sqlgroup.schema_migrations, sqlgroup.groups TO :"role";
-- Every claim reads the group's pauses (schema 17).
GRANT SELECT ON sqlgroup.pauses TO :"role";
-- Removing its group's dead letters past the group's retention (schema 18).
GRANT EXECUTE ON FUNCTION sqlgroup.dead_expire(text, integer) TO :"role";
GRANT SELECT, INSERT, DELETE,
  UPDATE (heartbeated_at, away_until, connections, connection_budget,
          circuit_open_since, circuit_error, member_version, member_schema)
  ON sqlgroup.sessions TO :"role";
-- UPDATE (acquired_at) is never used to update: acks hold their take FOR
-- KEY SHARE (schema 5), which PostgreSQL allows only with UPDATE on some
-- column. revoking_since marks a part being handed over (schema 13).
GRANT SELECT, INSERT, DELETE, UPDATE (acquired_at, revoking_since)
  ON sqlgroup.session_parts TO :"role";
GRANT USAGE ON SEQUENCE sqlgroup.part_epochs TO :"role";
GRANT SELECT, DELETE, UPDATE (attempts, last_error, not_before)
  ON sqlgroup.items TO :"role";
GRANT SELECT, INSERT,
  UPDATE (key, payload, enqueued_at, attempts, last_error, died_at)
  ON sqlgroup.dead_items TO :"role";
-- Its takes and their ends in the ownership history (schema 3), and
-- trimming history past its retention.
GRANT SELECT, INSERT, DELETE, UPDATE (released_at, released_by)
  ON sqlgroup.ownership_log TO :"role";
-- Topics (schema 20): the count of items published to its group's topic,
-- for the metrics (sqlgroup_topic_published_items).
GRANT EXECUTE ON FUNCTION sqlgroup.topic_published(text) TO :"role";
