-- 0006: outcomes, one row per message of ratelimit.outcomes (POST
-- /v1/report: what happened after a response), and the analysts' views of
-- the failures among them.

-- outcomes: partitioned by day on occurred_at like rate_limit_violations,
-- and maintained by the same code (outcomes_YYYYMMDD, UTC days, created
-- ahead and dropped after the retention period; the DEFAULT partition
-- catches rows outside them). Primary key (occurred_at, event_id): a
-- redelivered or re-published report is one row.
CREATE TABLE outcomes (
    event_id    uuid        NOT NULL,
    occurred_at timestamptz NOT NULL,    -- the message's ts: when the limiter received the report
    user_id     text,                    -- NULL for an anonymous request
    ip_address  inet        NOT NULL,
    endpoint    text        NOT NULL,
    http_method text        NOT NULL,
    user_tier   text        NOT NULL,
    status      smallint    NOT NULL,    -- the HTTP status the client got, 100 to 599
    cost        bigint      NOT NULL,    -- units the request used
    banned      boolean     NOT NULL,    -- the IP or user was banned when the report came
    instance    text        NOT NULL,    -- the limiter instance that received the report
    archived_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (occurred_at, event_id)
) PARTITION BY RANGE (occurred_at);

CREATE TABLE outcomes_default PARTITION OF outcomes DEFAULT;

-- The one index the views need beyond the primary key: failures_per_source_1h
-- reads the failures of the last hour. The primary key would find the hour
-- too, but visit every success of it; successes are most of the rows.
CREATE INDEX outcomes_failures_idx ON outcomes (occurred_at) WHERE status >= 400 AND NOT banned;

-- A failure is an outcome with status >= 400 whose subject was not banned:
-- a banned client's failures are mostly the ban's own refusals.

-- failures_per_endpoint_hourly: per hour (UTC hour start), endpoint and
-- status, the failures, and from how many client IPs and users they came.
-- Filter on "hour" (for example WHERE hour > now() - interval '1 day'); for
-- large ranges filter the base table on occurred_at instead, which prunes
-- partitions.
CREATE VIEW failures_per_endpoint_hourly AS
SELECT date_trunc('hour', occurred_at, 'UTC') AS hour,
       endpoint,
       status,
       count(*)                   AS failures,
       count(DISTINCT ip_address) AS distinct_sources,
       count(DISTINCT user_id)    AS distinct_users
FROM outcomes
WHERE status >= 400 AND NOT banned
GROUP BY 1, 2, 3;

-- failures_per_source_1h: client IPs by failures in the last hour, most
-- first; every column is about those failures. Many distinct users from one
-- IP is credential stuffing; many distinct endpoints is a scan.
CREATE VIEW failures_per_source_1h AS
SELECT ip_address,
       count(*)                 AS failures,
       count(DISTINCT user_id)  AS distinct_users,
       count(DISTINCT endpoint) AS distinct_endpoints,
       min(occurred_at)         AS first_seen,
       max(occurred_at)         AS last_seen,
       array_agg(DISTINCT status ORDER BY status) AS statuses
FROM outcomes
WHERE occurred_at > now() - interval '1 hour'
  AND status >= 400 AND NOT banned
GROUP BY ip_address
ORDER BY failures DESC, ip_address;

-- The reader role (0003) reads what the migrating role creates through its
-- default privileges; grant explicitly as well, in case this migration runs
-- under another role than 0003 did. Skipped, like 0003, when the role does
-- not exist.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ratewarden_reader') THEN
        GRANT SELECT ON outcomes, outcomes_default, failures_per_endpoint_hourly, failures_per_source_1h
            TO ratewarden_reader;
    END IF;
END
$$;
