-- 0008: what the console reads. bans.actor is the ban message's actor (who
-- banned or lifted by hand, through the admin API or the console), shown in
-- the audit trail; active_bans gains it as its last column. The indexes let
-- the console's pages read only what they show: the bans of a time range
-- (the overview), the people's actions (the audit trail), and a subject's
-- outcomes (its timeline), as rate_limit_violations already has for its
-- violations.
ALTER TABLE bans ADD COLUMN actor text;

CREATE OR REPLACE VIEW active_bans AS
SELECT scope, subject, ban_id, ts AS banned_at, expires_at, reason, count, threshold,
       window_s, duration_s, source, note, evidence, actor
FROM (
    SELECT DISTINCT ON (scope, subject) *
    FROM bans
    WHERE action IN ('ban', 'unban') AND NOT dry_run
    ORDER BY scope, subject, ts DESC, archived_at DESC, ban_id DESC
) latest
WHERE action = 'ban'
  AND (expires_at IS NULL OR expires_at > now());

CREATE INDEX bans_ts_idx ON bans (ts);
CREATE INDEX bans_admin_ts_idx ON bans (ts) WHERE source = 'admin';
CREATE INDEX outcomes_ip_idx ON outcomes (ip_address, occurred_at);
CREATE INDEX outcomes_user_idx ON outcomes (user_id, occurred_at);
