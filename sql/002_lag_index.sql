-- sqlgroup schema version 2: the age of a part's oldest waiting item, cheap
-- at any backlog. Scanning this index in time order finds the oldest
-- unclaimed item of a part after about P entries (keys are uniform), where
-- scanning the part's key range would read its whole backlog. Partial, so a
-- claim costs no entry here.
CREATE INDEX items_waiting_since ON sqlgroup.items (group_name, enqueued_at)
  WHERE claim_session IS NULL;
