-- 0002: views for analysts (README "Analysts: the Postgres tables"). Plain
-- views: always current, no refresh. Shadow rows (a shadow-mode rule that
-- would have denied, request allowed) are kept apart from real denials.

-- top_offenders_1h: client IPs by real denials (shadow rows excluded) in the
-- last hour, most first. A denial of a banned client counts too: it is the
-- same offender still knocking. distinct_users shows an IP spreading its
-- requests over several accounts.
CREATE VIEW top_offenders_1h AS
SELECT ip_address,
       count(*)                 AS violations,
       count(DISTINCT endpoint) AS distinct_endpoints,
       count(DISTINCT user_id)  AS distinct_users,
       min(occurred_at)         AS first_seen,
       max(occurred_at)         AS last_seen
FROM rate_limit_violations
WHERE occurred_at > now() - interval '1 hour'
  AND NOT shadow
GROUP BY ip_address
ORDER BY violations DESC, ip_address;

-- violations_per_endpoint_hourly: per hour (UTC hour start), endpoint and
-- rule, the real denials and, apart, the shadow ones. Filter on "hour" (for
-- example WHERE hour > now() - interval '1 day'); for large ranges filter the
-- base table on occurred_at instead, which prunes partitions.
CREATE VIEW violations_per_endpoint_hourly AS
SELECT date_trunc('hour', occurred_at, 'UTC') AS hour,
       endpoint,
       rule_id,
       count(*) FILTER (WHERE NOT shadow) AS violations,
       count(*) FILTER (WHERE shadow)     AS shadow_violations
FROM rate_limit_violations
GROUP BY 1, 2, 3;

-- active_bans: subjects whose latest enforcing decision is a ban still in
-- force. Only ban and unban messages that are not dry runs decide (a warning
-- or a dry-run ban changes nothing); a ban without expires_at is permanent.
CREATE VIEW active_bans AS
SELECT scope, subject, ban_id, ts AS banned_at, expires_at, reason, count, threshold,
       window_s, duration_s, source, note, evidence
FROM (
    SELECT DISTINCT ON (scope, subject) *
    FROM bans
    WHERE action IN ('ban', 'unban') AND NOT dry_run
    ORDER BY scope, subject, ts DESC, archived_at DESC, ban_id DESC
) latest
WHERE action = 'ban'
  AND (expires_at IS NULL OR expires_at > now());
