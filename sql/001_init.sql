-- sqlgroup schema version 1: groups, sessions, part ownership, items.
-- Applied by `sqlgroup migrate` in one transaction. Kept within what
-- PostgreSQL and CockroachDB share (no triggers, no PG-only types).

CREATE SCHEMA IF NOT EXISTS sqlgroup;

-- A consumer group over one queue of items.
CREATE TABLE sqlgroup.groups (
  name               text        PRIMARY KEY,
  parts              integer     NOT NULL,
  session_ttl        interval    NOT NULL DEFAULT '5 seconds',
  heartbeat_interval interval    NOT NULL DEFAULT '1 second',
  created_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
  CONSTRAINT groups_name_valid
    CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$'),
  CONSTRAINT groups_parts_range CHECK (parts BETWEEN 1 AND 4096),
  CONSTRAINT groups_heartbeat_well_under_ttl
    CHECK (heartbeat_interval > interval '0' AND
           heartbeat_interval * 2 <= session_ttl)
);

-- One live member. Times come from the database clock only. Expired once
-- heartbeated_at < clock_timestamp() - groups.session_ttl; an expired
-- session cannot heartbeat itself back (the heartbeat is fenced on it).
CREATE TABLE sqlgroup.sessions (
  id             uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
  group_name     text        NOT NULL
                   REFERENCES sqlgroup.groups (name) ON DELETE CASCADE,
  created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
  heartbeated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  host           text        NOT NULL DEFAULT '',
  pid            integer     NOT NULL DEFAULT 0,
  instance       text,
  -- Target of session_parts' foreign key; also serves "members of a group
  -- in lexical order".
  CONSTRAINT sessions_group_id UNIQUE (group_name, id)
);
CREATE INDEX sessions_group_heartbeat
  ON sqlgroup.sessions (group_name, heartbeated_at);

-- Every take of a part gets a fresh epoch: a fencing token, so a part
-- dropped and taken back does not revive claims from before the drop.
CREATE SEQUENCE sqlgroup.part_epochs;

-- Ownership. The primary key is the database's guarantee that a part has at
-- most one owner; reaping a session drops its parts in the same statement.
CREATE TABLE sqlgroup.session_parts (
  group_name  text        NOT NULL,
  part        integer     NOT NULL CHECK (part BETWEEN 0 AND 4095),
  session_id  uuid        NOT NULL,
  epoch       bigint      NOT NULL DEFAULT nextval('sqlgroup.part_epochs'),
  acquired_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (group_name, part),
  -- Target of the items' claim; leads with session_id so the cascade from
  -- sessions finds a session's parts by index.
  CONSTRAINT session_parts_take UNIQUE (session_id, part, epoch),
  CONSTRAINT session_parts_session FOREIGN KEY (group_name, session_id)
    REFERENCES sqlgroup.sessions (group_name, id) ON DELETE CASCADE
);

-- The queue. id is the key that places an item in a part's range. A claim
-- points at one take of a part; dropping the part (or reaping its session)
-- nulls every claim under it in the same transaction.
CREATE TABLE sqlgroup.items (
  group_name    text        NOT NULL,
  id            uuid        NOT NULL DEFAULT gen_random_uuid(),
  key           text,
  payload       bytea       NOT NULL DEFAULT '',
  enqueued_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
  attempts      integer     NOT NULL DEFAULT 0,
  not_before    timestamptz NOT NULL DEFAULT '-infinity',
  last_error    text,
  claim_session uuid,
  claim_part    integer,
  claim_epoch   bigint,
  claimed_at    timestamptz,
  PRIMARY KEY (group_name, id),
  CONSTRAINT items_claim FOREIGN KEY (claim_session, claim_part, claim_epoch)
    REFERENCES sqlgroup.session_parts (session_id, part, epoch)
    ON DELETE SET NULL,
  CONSTRAINT items_claim_whole CHECK (
    (claim_session IS NULL) = (claim_part IS NULL) AND
    (claim_session IS NULL) = (claim_epoch IS NULL))
) WITH (
  -- Every claim is an UPDATE and every ack a DELETE: leave room on each page
  -- and vacuum early, so dead tuples do not pile up under the claim scans.
  fillfactor = 80,
  autovacuum_vacuum_scale_factor = 0.01,
  autovacuum_vacuum_threshold = 1000,
  autovacuum_vacuum_insert_scale_factor = 0.05,
  autovacuum_analyze_scale_factor = 0.02,
  autovacuum_vacuum_cost_delay = 0
);

-- "Unclaimed items of a group in a key range, in key order": the claim
-- sweep reads this index from its cursor, so its cost does not grow with
-- the backlog. not_before rides along so items in backoff are skipped
-- without visiting the table.
CREATE INDEX items_unclaimed ON sqlgroup.items (group_name, id)
  INCLUDE (not_before) WHERE claim_session IS NULL;
-- Makes the ON DELETE SET NULL cascade an index lookup, not a table scan,
-- and, ending in id, makes the fenced ack of one item a point lookup.
CREATE INDEX items_claims
  ON sqlgroup.items (claim_session, claim_part, claim_epoch, id)
  WHERE claim_session IS NOT NULL;

-- Items that failed max_attempts times, with the last error. Nothing is
-- ever dropped silently.
CREATE TABLE sqlgroup.dead_items (
  group_name  text        NOT NULL,
  id          uuid        NOT NULL,
  key         text,
  payload     bytea       NOT NULL,
  enqueued_at timestamptz NOT NULL,
  attempts    integer     NOT NULL,
  last_error  text,
  died_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (group_name, id)
);
