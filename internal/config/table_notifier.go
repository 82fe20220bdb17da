package config

import "time"

// notifierVars are the rows of the notifier alone.
var notifierVars = []Var{
	{Name: "NOTIFY_GROUP_ID", Default: "ratewarden-notifier", Readers: notifierOnly,
		Meaning: "consumer group on the bans topic, its own: a receiver down holds this group's offsets, never the detector's or the archiver's",
		load:    bind(inNotifier(func(c *Notifier) *string { return &c.GroupID }), text)},
	{Name: "NOTIFY_RECEIVERS_FILE", Readers: notifierOnly,
		Meaning: "required: the YAML file of the webhooks to notify, what each wants and its secrets (see [Ban notifications](ban-notifications.md))",
		load:    bind(inNotifier(func(c *Notifier) *string { return &c.ReceiversFile }), text)},
	{Name: "NOTIFY_DIGEST_DELAY", Default: "30s", Readers: notifierOnly,
		Meaning: "length of a digest's window: the bans of one scenario and scope whose messages fall in one window (by their timestamps) become one message per receiver",
		load:    bind(inNotifier(func(c *Notifier) *time.Duration { return &c.DigestDelay }), positiveDuration)},
	{Name: "NOTIFY_DIGEST_GRACE", Default: "2s", Readers: notifierOnly,
		Meaning: "how long after its end a window waits for messages still on their way (producers' clocks, the partitions read behind)",
		load:    bind(inNotifier(func(c *Notifier) *time.Duration { return &c.DigestGrace }), durationOrZero)},
	{Name: "NOTIFY_MAX_PENDING", Default: "10000", Readers: notifierOnly,
		Meaning: "messages read and not yet committed, 1 to 1 000 000: past it the notifier stops reading (its lag grows) until receivers accept what it holds",
		load:    bind(inNotifier(func(c *Notifier) *int { return &c.MaxPending }), intBetween(1, 1_000_000))},
	{Name: "NOTIFY_MAX_DIGESTS_PER_WINDOW", Default: "10", Readers: notifierOnly,
		Meaning: "digests a receiver gets of one window at most, 1 to 1 000: past it the largest groups get theirs and the rest one digest with their counts, so messages of many distinct reasons cost a receiver a bounded number of posts",
		load:    bind(inNotifier(func(c *Notifier) *int { return &c.MaxDigests }), intBetween(1, 1000))},
	{Name: "NOTIFY_TIMEOUT", Default: "10s", Readers: notifierOnly,
		Meaning: "deadline of one request to a receiver; past it the request is retried",
		load:    bind(inNotifier(func(c *Notifier) *time.Duration { return &c.Timeout }), positiveDuration)},
	{Name: "NOTIFY_MAX_BACKOFF", Default: "1m", Readers: notifierOnly,
		Meaning: "longest wait between two attempts at a digest (the waits double from 1s, with jitter); a digest is retried until accepted",
		load:    bind(inNotifier(func(c *Notifier) *time.Duration { return &c.MaxBackoff }), positiveDuration)},
}
