-- 0005: violations decided through Envoy's rate limit API (ShouldRateLimit,
-- POST /json) keep their domain and descriptors; NULL for the others.
-- descriptors is the event's array: [{"entries": [{"key", "value"}...],
-- "rule_id", "code"}...], in the request's order.
ALTER TABLE rate_limit_violations ADD COLUMN domain text, ADD COLUMN descriptors jsonb;
