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

-- A member whose handler fails every item (an outage of what it calls)
-- stops handing items to it and tries one now and then (a circuit
-- breaker); while it does, its session says since when and the last
-- error, for `group describe`. NULL while the handler works.
ALTER TABLE sqlgroup.sessions
  ADD COLUMN IF NOT EXISTS circuit_open_since timestamptz,
  ADD COLUMN IF NOT EXISTS circuit_error text;

-- Also from schema 13, the ownership history says how a take ended when
-- its session went: 'reap' (expired: the member died or was cut off) and
-- 'replaced' (a live static session replaced by a new process under its
-- name) end it uncleanly, 'away' (a static member that stepped away and
-- did not return in time) and 'returned' (replaced while away) cleanly,
-- as 'drop' and 'leave' do. The next owner of a part whose take ended
-- uncleanly counts an attempt for the items it hands out first that were
-- due then: they may have been with the dead member's handler. No change
-- of the table: released_by is free text.
