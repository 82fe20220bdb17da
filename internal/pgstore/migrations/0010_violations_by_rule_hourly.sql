-- 0010: violations_by_rule_hourly, the violations counted per UTC hour, rule
-- and shadow as they are archived, so a count over many hours (the console's
-- rules page: the last 24 hours, 1.4 million rows at 10 million a week)
-- reads a few rows a rule instead of every violation.
--
-- A statement trigger on rate_limit_violations keeps it: its transition
-- table holds exactly the rows the statement inserted (an INSERT ... ON
-- CONFLICT DO NOTHING leaves a redelivered event out), in the same
-- transaction. A trigger rather than the archiver's own statement, so every
-- writer keeps the counts: an archiver of the previous release still running
-- during an upgrade, a load or backfill by hand. Rows moved out of the
-- DEFAULT partition go straight into the new partition, not through the
-- parent: they are not counted twice.
--
-- Concurrent archivers update the same (hour, rule) rows: the trigger takes
-- their row locks in key order, so two of them wait for each other but never
-- deadlock, and each row is locked from the end of the violations' INSERT to
-- the commit.
--
-- Retention (pgstore.DropPartitions) deletes the hours of the days whose
-- partitions it drops. Rows deleted or updated by hand are not taken off
-- the counts.
CREATE TABLE violations_by_rule_hourly (
    hour    timestamptz NOT NULL,    -- the UTC hour's start: date_trunc('hour', occurred_at, 'UTC')
    rule_id text        NOT NULL,
    shadow  boolean     NOT NULL,    -- true: a shadow rule's would-be denials
    n       bigint      NOT NULL,    -- violations of that hour, rule and shadow
    PRIMARY KEY (hour, rule_id, shadow)
);

-- No violation may commit between the backfill's read and the trigger's
-- creation (it would be counted by neither): writers wait for this
-- migration, readers do not.
LOCK TABLE rate_limit_violations IN SHARE ROW EXCLUSIVE MODE;

CREATE FUNCTION count_violations_by_rule_hourly() RETURNS trigger
LANGUAGE plpgsql
-- The tables of the schema the migration runs in, whatever the writer's
-- search_path.
SET search_path FROM CURRENT
AS $$
BEGIN
    INSERT INTO violations_by_rule_hourly AS v (hour, rule_id, shadow, n)
    SELECT date_trunc('hour', occurred_at, 'UTC'), rule_id, shadow, count(*)
    FROM inserted
    GROUP BY 1, 2, 3
    ORDER BY 1, 2, 3    -- the lock order of concurrent writers
    ON CONFLICT (hour, rule_id, shadow) DO UPDATE SET n = v.n + excluded.n;
    RETURN NULL;
END
$$;

CREATE TRIGGER rate_limit_violations_count_by_rule_hourly
    AFTER INSERT ON rate_limit_violations
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION count_violations_by_rule_hourly();

INSERT INTO violations_by_rule_hourly (hour, rule_id, shadow, n)
SELECT date_trunc('hour', occurred_at, 'UTC'), rule_id, shadow, count(*)
FROM rate_limit_violations
GROUP BY 1, 2, 3;

-- As 0006: the reader role reads it (explicitly, in case this migration runs
-- under another role than 0003 did).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ratewarden_reader') THEN
        GRANT SELECT ON violations_by_rule_hourly TO ratewarden_reader;
    END IF;
END
$$;
