-- What an operator (`sqlgroup dead|items|group pause|resume`, the Admin
-- operations of sqlgroup/operations.h) may do in the sqlgroup schema, and
-- nothing more: read the groups and the schema version, and call the
-- operations' functions (sql/017_operate_items.sql). Those run as the
-- schema's owner (SECURITY DEFINER) and each does one thing in one
-- transaction, so the role needs no privilege on the items or the dead
-- letters themselves: it cannot delete an item outside a function, touch
-- a session or a part, or write a dead letter. `group describe` reads
-- sessions, parts and items too.
--
-- Applied by `sqlgroup grant --operator_role ROLE [--group G]...`
-- (Admin::GrantRoles), which first revokes everything ROLE had on the
-- schema, or by hand: psql -v role=ROLE -v groups='{G,...}' -f
-- sql/grants/operator.sql. Run it again after every migration. Each
-- operation checks the grant for its group (schema 19).
GRANT USAGE ON SCHEMA sqlgroup TO :"role";
SELECT sqlgroup.grant_groups('operator', :'role', :'groups');
GRANT EXECUTE ON FUNCTION sqlgroup.require_grant(text, text) TO :"role";
GRANT SELECT ON sqlgroup.schema_migrations, sqlgroup.groups,
  sqlgroup.sessions, sqlgroup.session_parts, sqlgroup.pauses,
  sqlgroup.ownership_log TO :"role";
GRANT SELECT (group_name, id, key, attempts, not_before, enqueued_at)
  ON sqlgroup.items TO :"role";
GRANT SELECT (group_name, id) ON sqlgroup.dead_items TO :"role";
GRANT EXECUTE ON FUNCTION
  sqlgroup.dead_list(text, text, text, timestamptz, integer),
  sqlgroup.dead_show(text, uuid),
  sqlgroup.dead_requeue(text, uuid[], text, text, boolean, text, boolean),
  sqlgroup.dead_purge(text, uuid[], text, interval, boolean, boolean),
  sqlgroup.items_list(text, text, integer, integer),
  sqlgroup.items_show(text, uuid),
  sqlgroup.items_cancel(text, uuid[], text, boolean),
  sqlgroup.pause(text, text),
  sqlgroup.resume(text, text)
  TO :"role";
-- Topics (schema 20): their names and counts, for `topic list` and `topic
-- describe` (which show only the groups the role may read, and their
-- items).
GRANT SELECT ON sqlgroup.topics TO :"role";
GRANT EXECUTE ON FUNCTION sqlgroup.topic_published(text) TO :"role";
