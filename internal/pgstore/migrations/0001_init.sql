-- 0001: tables of the archive (README "Analysts: the Postgres tables").
-- Applied by pgstore.Migrate in one transaction, under an advisory lock.

-- rate_limit_violations: one row per archived decision (allowed = false, or
-- shadow = true). Partitioned by day on occurred_at; the archiver creates the
-- daily partitions ahead of time (rate_limit_violations_YYYYMMDD, UTC days)
-- and drops them after the retention period.
--
-- The primary key must contain the partition column, so it is
-- (occurred_at, event_id): a redelivered message (same event_id, same ts) is
-- one row. Two different timestamps under one event_id would be two rows;
-- the limiter never produces that.
CREATE TABLE rate_limit_violations (
    event_id       uuid        NOT NULL,
    occurred_at    timestamptz NOT NULL,
    user_id        text,                 -- NULL for an anonymous request
    ip_address     inet        NOT NULL,
    endpoint       text        NOT NULL,
    http_method    text        NOT NULL,
    user_tier      text        NOT NULL,
    rule_id        text        NOT NULL,
    algorithm      text        NOT NULL,
    reason         text        NOT NULL, -- rate_limited, banned, or ok with shadow = true
    limit_value    bigint      NOT NULL,
    current_count  bigint      NOT NULL, -- units used in the window: limit - remaining
    retry_after_ms bigint      NOT NULL,
    shadow         boolean     NOT NULL, -- a shadow-mode rule would have denied; the request was allowed
    instance       text        NOT NULL, -- the limiter instance that decided
    archived_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (occurred_at, event_id)
) PARTITION BY RANGE (occurred_at);

-- The DEFAULT partition catches every row outside the daily partitions: a
-- late event older than the oldest partition, or a clock-skewed one beyond
-- the newest. Without it such a row would fail its whole batch ("no
-- partition of relation found for row"). It is normally empty or small;
-- pgstore.EnsurePartitions moves its rows into a daily partition when that
-- day's partition is created, and pgstore.DropPartitions deletes its rows
-- older than the retention period.
CREATE TABLE rate_limit_violations_default PARTITION OF rate_limit_violations DEFAULT;

-- Indexes for the analysts' queries, declared on the parent so every
-- partition (existing and future) gets its own copy.
CREATE INDEX rate_limit_violations_occurred_at_idx ON rate_limit_violations (occurred_at);
CREATE INDEX rate_limit_violations_ip_idx          ON rate_limit_violations (ip_address, occurred_at);
CREATE INDEX rate_limit_violations_user_idx        ON rate_limit_violations (user_id, occurred_at);
CREATE INDEX rate_limit_violations_rule_idx        ON rate_limit_violations (rule_id, occurred_at);

-- bans: one row per message of ratelimit.bans (ban, unban or warn), with the
-- message's fields under the message's names. ban_id is unique and derives
-- from scope, subject, rule and window, so a redelivered or re-published ban
-- is one row.
CREATE TABLE bans (
    ban_id      text        PRIMARY KEY,
    ts          timestamptz NOT NULL,    -- when the ban was decided
    action      text        NOT NULL,    -- ban, unban, warn
    scope       text        NOT NULL,    -- ip, user
    subject     text        NOT NULL,
    reason      text        NOT NULL,    -- detection rule (scan, violations_1h, ...) or manual
    count       bigint      NOT NULL,
    threshold   bigint      NOT NULL,
    window_s    bigint      NOT NULL,
    duration_s  bigint      NOT NULL,
    expires_at  timestamptz,             -- NULL for an unban or a warning
    source      text        NOT NULL,    -- detector, admin
    dry_run     boolean     NOT NULL,
    note        text,                    -- operator's note on a manual ban; NULL when empty
    evidence    jsonb       NOT NULL,    -- {"first_ts", "last_ts", "sample_endpoints"} as in the message
    archived_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX bans_scope_subject_ts_idx ON bans (scope, subject, ts);

-- dead_letters: messages that can never be archived (undecodable JSON,
-- values Postgres would reject), written in the same transaction as the
-- batch they came with. Unique on the Kafka position, so a redelivered
-- poison message is one row.
CREATE TABLE dead_letters (
    id          bigserial   PRIMARY KEY,
    topic       text        NOT NULL,
    "partition" integer     NOT NULL,
    "offset"    bigint      NOT NULL,
    raw         bytea       NOT NULL,    -- the message value as received
    error       text        NOT NULL,    -- why it was rejected
    received_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (topic, "partition", "offset")
);
