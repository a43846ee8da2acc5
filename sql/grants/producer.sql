-- What a producer (a Producer, `sqlgroup produce`) may do in the sqlgroup
-- schema: read the schema version and the groups, and enqueue items.
-- Applied like member.sql: `sqlgroup grant --producer_role ROLE`, or
-- psql -v role=ROLE -f sql/grants/producer.sql.
GRANT USAGE ON SCHEMA sqlgroup TO :"role";
GRANT SELECT ON sqlgroup.schema_migrations, sqlgroup.groups TO :"role";
GRANT INSERT ON sqlgroup.items TO :"role";
