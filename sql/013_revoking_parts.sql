-- sqlgroup schema version 13: parts waiting for their handler calls while
-- they change hands (issue 37).
--
-- A part moves to its new owner only after every handler call its old
-- owner started on it returned: a slow handler is never run on two live
-- members at once. Meanwhile the old owner still owns it, and marks when
-- it began handing it over, so `group describe` shows the part as
-- revoking, with how long it has waited. NULL when the part is not being
-- handed over (and for parts of members older than schema 13, which never
-- mark it).
ALTER TABLE sqlgroup.session_parts
  ADD COLUMN IF NOT EXISTS revoking_since timestamptz;
