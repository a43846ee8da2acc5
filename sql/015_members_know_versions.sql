-- sqlgroup schema version 15: every member records its version (issue 44).
-- members-from: 14
--
-- The contract that follows schema 14's expand: members a release before 0.15
-- record no version and read no "schema:" notice, so they could run
-- unseen against any later schema. From here on the database refuses
-- their sessions (the trigger of schema 14 counts them as knowing schema
-- 13), `sqlgroup migrate` refuses to reach this schema while one is live
-- (unless --force, which ends their sessions), and every live member has
-- a version that `migrate` can weigh against the next schema.
--
-- Nothing else changes: a member of 0.15 runs against this schema as
-- against 14.
COMMENT ON COLUMN sqlgroup.sessions.member_schema IS
  'The newest schema the member knows; NULL only for members of releases before '
  '0.15, which schema 15 and later refuse.';
