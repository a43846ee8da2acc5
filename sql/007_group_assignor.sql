-- sqlgroup schema version 7: the assignor is a setting of the group.
--
-- Every member of a group must compute the same assignment, so the
-- assignor is stored with the group rather than chosen by each process:
-- 'lexical' (the default: session i of N gets the contiguous block
-- [floor(iP/N), floor((i+1)P/N)) in the lexical order of the sessions) or
-- 'sticky' (balanced to within one part, moving only what balance needs:
-- include/sqlgroup/assignor.h). Members read it with the other settings on
-- every heartbeat, so a change reaches a running group at its next
-- rebalance, and a member that does not know the name stops with an error
-- instead of assigning differently from the others.
ALTER TABLE sqlgroup.groups
  ADD COLUMN IF NOT EXISTS assignor text NOT NULL DEFAULT 'lexical'
    CONSTRAINT groups_assignor_valid CHECK (assignor IN ('lexical', 'sticky'));
