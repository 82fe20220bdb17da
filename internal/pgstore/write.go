package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/ratewarden/ratewarden/internal/archiver"
	"github.com/ratewarden/ratewarden/internal/event"
)

// Store is the archiver's archive.
var _ archiver.Store = (*Store)(nil)

// Write stores the batch in one transaction: all of it or nothing. Rows
// already stored (same event_id and occurred_at for a violation or an
// outcome, same ban_id, same Kafka position for a dead letter) are skipped and counted as Duplicates, so
// writing a redelivered batch again is harmless.
//
// Write assumes validated rows (ValidateViolation, ValidateBan,
// ValidateOutcome); it checks
// them again before touching the database and returns an
// *archiver.RowError naming the first invalid one. Should Postgres still
// reject a row, Write finds it (row by row, in a transaction it rolls back)
// and returns an *archiver.RowError too. Dead letters are never rejected:
// their topic and error text are made valid UTF-8 without NUL bytes.
// Errors for which isTransient is true are worth retrying with the same
// batch; that is safe even when the commit's outcome is unknown (a
// connection lost during COMMIT): rows already stored come back as
// Duplicates.
func (s *Store) Write(ctx context.Context, b archiver.Batch) (archiver.Result, error) {
	vs, err := violationArgs(b.Violations)
	if err != nil {
		return archiver.Result{}, err
	}
	bs, err := banArgs(b.Bans)
	if err != nil {
		return archiver.Result{}, err
	}
	outs, err := outcomeArgs(b.Outcomes)
	if err != nil {
		return archiver.Result{}, err
	}
	ds := deadLetterArgs(b.DeadLetters)

	var res archiver.Result
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		res = archiver.Result{}
		for _, t := range [...]struct {
			sql  string
			args columns
			n    *int
		}{
			{insertViolations, vs, &res.Violations},
			{insertBans, bs, &res.Bans},
			{insertOutcomes, outs, &res.Outcomes},
			{insertDeadLetters, ds, &res.DeadLetters},
		} {
			if t.args.len() == 0 {
				continue
			}
			tag, err := tx.Exec(ctx, t.sql, t.args.slice(0, t.args.len())...)
			if err != nil {
				return err
			}
			*t.n = int(tag.RowsAffected())
		}
		return nil
	})
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && !isTransient(err) {
			if rowErr := s.locate(ctx, vs, bs, outs, ds); rowErr != nil {
				return archiver.Result{}, rowErr
			}
		}
		return archiver.Result{}, fmt.Errorf("write batch: %w", err)
	}
	res.Duplicates = len(b.Violations) + len(b.Bans) + len(b.Outcomes) + len(b.DeadLetters) -
		res.Violations - res.Bans - res.Outcomes - res.DeadLetters
	return res, nil
}

// locate inserts the rows one by one, each under a savepoint, in a
// transaction it rolls back, and returns the first that fails, or nil.
func (s *Store) locate(ctx context.Context, vs, bs, outs, ds columns) *archiver.RowError {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	for _, t := range [...]struct {
		table, sql string
		args       columns
	}{
		{archiver.ViolationsTable, insertViolations, vs},
		{archiver.BansTable, insertBans, bs},
		{archiver.OutcomesTable, insertOutcomes, outs},
		{archiver.DeadLettersTable, insertDeadLetters, ds},
	} {
		for i := range t.args.len() {
			sp, err := tx.Begin(ctx)
			if err != nil {
				return nil
			}
			if _, err := sp.Exec(ctx, t.sql, t.args.slice(i, i+1)...); err != nil {
				if isTransient(err) {
					return nil
				}
				return &archiver.RowError{Table: t.table, Index: i, Err: err}
			}
			if err := sp.Commit(ctx); err != nil { // releases the savepoint
				return nil
			}
		}
	}
	return nil
}

// columns is a batch of rows of one table, column by column, as the
// parameters of an INSERT ... SELECT FROM unnest(...).
type columns interface {
	len() int
	slice(i, j int) []any
}

const insertViolations = `INSERT INTO rate_limit_violations (event_id, occurred_at, user_id, ip_address, endpoint,
	http_method, user_tier, rule_id, algorithm, reason, limit_value, current_count, retry_after_ms, shadow, instance,
	domain, descriptors)
SELECT event_id, occurred_at, NULLIF(user_id, ''), ip_address, endpoint,
	http_method, user_tier, rule_id, algorithm, reason, limit_value, current_count, retry_after_ms, shadow, instance,
	NULLIF(domain, ''), NULLIF(descriptors, '')::jsonb
FROM unnest($1::uuid[], $2::timestamptz[], $3::text[], $4::inet[], $5::text[],
	$6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::bigint[], $12::bigint[], $13::bigint[], $14::boolean[], $15::text[],
	$16::text[], $17::text[])
	AS t(event_id, occurred_at, user_id, ip_address, endpoint,
	http_method, user_tier, rule_id, algorithm, reason, limit_value, current_count, retry_after_ms, shadow, instance,
	domain, descriptors)
ON CONFLICT DO NOTHING`

type violationColumns struct {
	eventID                                                         []pgtype.UUID
	occurredAt                                                      []time.Time
	ip                                                              []netip.Addr
	userID, endpoint, method, tier, ruleID, algorithm, reason, inst []string
	domain, descriptors                                             []string
	limit, current, retryAfter                                      []int64
	shadow                                                          []bool
}

func violationArgs(vs []archiver.Violation) (*violationColumns, error) {
	n := len(vs)
	c := &violationColumns{
		eventID: make([]pgtype.UUID, n), occurredAt: make([]time.Time, n), ip: make([]netip.Addr, n),
		userID: make([]string, n), endpoint: make([]string, n), method: make([]string, n), tier: make([]string, n),
		ruleID: make([]string, n), algorithm: make([]string, n), reason: make([]string, n), inst: make([]string, n),
		limit: make([]int64, n), current: make([]int64, n), retryAfter: make([]int64, n), shadow: make([]bool, n),
		domain: make([]string, n), descriptors: make([]string, n),
	}
	for i, v := range vs {
		if err := validateViolation(v); err != nil {
			return nil, &archiver.RowError{Table: archiver.ViolationsTable, Index: i, Err: err}
		}
		id, _ := parseUUID(v.EventID)
		ip, _ := parseIP(v.IP)
		c.eventID[i] = pgtype.UUID{Bytes: id, Valid: true}
		c.occurredAt[i], c.ip[i] = v.OccurredAt, ip
		c.userID[i], c.endpoint[i], c.method[i], c.tier[i] = v.UserID, v.Endpoint, v.Method, v.Tier
		c.ruleID[i], c.algorithm[i], c.reason[i], c.inst[i] = v.RuleID, v.Algorithm, v.Reason, v.Instance
		c.limit[i], c.current[i], c.retryAfter[i], c.shadow[i] = v.Limit, v.CurrentCount, v.RetryAfterMs, v.Shadow
		c.domain[i], c.descriptors[i] = v.Domain, v.Descriptors
	}
	return c, nil
}

func (c *violationColumns) len() int { return len(c.eventID) }

func (c *violationColumns) slice(i, j int) []any {
	return []any{c.eventID[i:j], c.occurredAt[i:j], c.userID[i:j], c.ip[i:j], c.endpoint[i:j],
		c.method[i:j], c.tier[i:j], c.ruleID[i:j], c.algorithm[i:j], c.reason[i:j],
		c.limit[i:j], c.current[i:j], c.retryAfter[i:j], c.shadow[i:j], c.inst[i:j],
		c.domain[i:j], c.descriptors[i:j]}
}

const insertBans = `INSERT INTO bans (ban_id, ts, action, scope, subject, reason, count, threshold,
	window_s, duration_s, expires_at, source, dry_run, note, evidence, actor)
SELECT ban_id, ts, action, scope, subject, reason, count, threshold,
	window_s, duration_s, expires_at, source, dry_run, NULLIF(note, ''), evidence::jsonb, NULLIF(actor, '')
FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8::bigint[],
	$9::bigint[], $10::bigint[], $11::timestamptz[], $12::text[], $13::boolean[], $14::text[], $15::text[], $16::text[])
	AS t(ban_id, ts, action, scope, subject, reason, count, threshold,
	window_s, duration_s, expires_at, source, dry_run, note, evidence, actor)
ON CONFLICT DO NOTHING`

type banColumns struct {
	ts                                                                   []time.Time
	expiresAt                                                            []pgtype.Timestamptz
	banID, action, scope, subject, reason, source, note, evidence, actor []string
	count, threshold, windowS, durationS                                 []int64
	dryRun                                                               []bool
}

// evidenceJSON is the evidence column: the message's evidence object.
type evidenceJSON struct {
	FirstTS         *time.Time `json:"first_ts"`
	LastTS          *time.Time `json:"last_ts"`
	SampleEndpoints []string   `json:"sample_endpoints"`
	// The users and sources of a ban from outcomes (credential stuffing,
	// an account attack), absent from the others as from their message.
	SampleUsers   []string `json:"sample_users,omitempty"`
	SampleSources []string `json:"sample_sources,omitempty"`
	SparedSources []string `json:"spared_sources,omitempty"`
}

func banArgs(bans []event.Ban) (*banColumns, error) {
	n := len(bans)
	c := &banColumns{
		ts: make([]time.Time, n), expiresAt: make([]pgtype.Timestamptz, n),
		banID: make([]string, n), action: make([]string, n), scope: make([]string, n), subject: make([]string, n),
		reason: make([]string, n), source: make([]string, n), note: make([]string, n), evidence: make([]string, n), actor: make([]string, n),
		count: make([]int64, n), threshold: make([]int64, n), windowS: make([]int64, n), durationS: make([]int64, n),
		dryRun: make([]bool, n),
	}
	for i, b := range bans {
		if err := validateBan(b); err != nil {
			return nil, &archiver.RowError{Table: archiver.BansTable, Index: i, Err: err}
		}
		ev := evidenceJSON{FirstTS: utcOrNil(b.Evidence.FirstTS), LastTS: utcOrNil(b.Evidence.LastTS), SampleEndpoints: b.Evidence.SampleEndpoints,
			SampleUsers: b.Evidence.SampleUsers, SampleSources: b.Evidence.SampleSources, SparedSources: b.Evidence.SparedSources}
		if ev.SampleEndpoints == nil {
			ev.SampleEndpoints = []string{}
		}
		evidence, err := json.Marshal(ev)
		if err != nil {
			return nil, &archiver.RowError{Table: archiver.BansTable, Index: i, Err: err}
		}
		c.ts[i] = b.TS
		c.expiresAt[i] = pgtype.Timestamptz{Time: b.ExpiresAt, Valid: !b.ExpiresAt.IsZero()}
		c.banID[i], c.action[i], c.scope[i], c.subject[i] = b.BanID, b.Action, b.Scope, b.Subject
		c.reason[i], c.source[i], c.note[i], c.evidence[i] = b.Reason, b.Source, b.Note, string(evidence)
		c.count[i], c.threshold[i], c.windowS[i], c.durationS[i] = b.Count, b.Threshold, b.WindowS, b.DurationS
		c.dryRun[i], c.actor[i] = b.DryRun, b.Actor
	}
	return c, nil
}

func utcOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

func (c *banColumns) len() int { return len(c.banID) }

func (c *banColumns) slice(i, j int) []any {
	return []any{c.banID[i:j], c.ts[i:j], c.action[i:j], c.scope[i:j], c.subject[i:j], c.reason[i:j],
		c.count[i:j], c.threshold[i:j], c.windowS[i:j], c.durationS[i:j], c.expiresAt[i:j],
		c.source[i:j], c.dryRun[i:j], c.note[i:j], c.evidence[i:j], c.actor[i:j]}
}

const insertOutcomes = `INSERT INTO outcomes (event_id, occurred_at, user_id, ip_address, endpoint,
	http_method, user_tier, status, cost, banned, instance, user_banned)
SELECT event_id, occurred_at, NULLIF(user_id, ''), ip_address, endpoint,
	http_method, user_tier, status, cost, banned, instance, user_banned
FROM unnest($1::uuid[], $2::timestamptz[], $3::text[], $4::inet[], $5::text[],
	$6::text[], $7::text[], $8::smallint[], $9::bigint[], $10::boolean[], $11::text[], $12::boolean[])
	AS t(event_id, occurred_at, user_id, ip_address, endpoint,
	http_method, user_tier, status, cost, banned, instance, user_banned)
ON CONFLICT DO NOTHING`

type outcomeColumns struct {
	eventID                              []pgtype.UUID
	occurredAt                           []time.Time
	ip                                   []netip.Addr
	userID, endpoint, method, tier, inst []string
	status                               []int16
	cost                                 []int64
	banned, userBanned                   []bool
}

func outcomeArgs(outs []event.Outcome) (*outcomeColumns, error) {
	n := len(outs)
	c := &outcomeColumns{
		eventID: make([]pgtype.UUID, n), occurredAt: make([]time.Time, n), ip: make([]netip.Addr, n),
		userID: make([]string, n), endpoint: make([]string, n), method: make([]string, n), tier: make([]string, n),
		inst: make([]string, n), status: make([]int16, n), cost: make([]int64, n), banned: make([]bool, n),
		userBanned: make([]bool, n),
	}
	for i, o := range outs {
		if err := validateOutcome(o); err != nil {
			return nil, &archiver.RowError{Table: archiver.OutcomesTable, Index: i, Err: err}
		}
		id, _ := parseUUID(o.EventID)
		ip, _ := parseIP(o.IP)
		c.eventID[i] = pgtype.UUID{Bytes: id, Valid: true}
		c.occurredAt[i], c.ip[i] = o.TS, ip
		c.userID[i], c.endpoint[i], c.method[i], c.tier[i], c.inst[i] = o.UserID, o.Endpoint, o.Method, o.Tier, o.Instance
		c.status[i], c.cost[i], c.banned[i], c.userBanned[i] = int16(o.Status), o.Cost, o.Banned, o.UserBanned
	}
	return c, nil
}

func (c *outcomeColumns) len() int { return len(c.eventID) }

func (c *outcomeColumns) slice(i, j int) []any {
	return []any{c.eventID[i:j], c.occurredAt[i:j], c.userID[i:j], c.ip[i:j], c.endpoint[i:j],
		c.method[i:j], c.tier[i:j], c.status[i:j], c.cost[i:j], c.banned[i:j], c.inst[i:j], c.userBanned[i:j]}
}

const insertDeadLetters = `INSERT INTO dead_letters (topic, "partition", "offset", raw, error)
SELECT * FROM unnest($1::text[], $2::integer[], $3::bigint[], $4::bytea[], $5::text[])
ON CONFLICT DO NOTHING`

type deadLetterColumns struct {
	topic, errText []string
	partition      []int32
	offset         []int64
	raw            [][]byte
}

func deadLetterArgs(ds []archiver.DeadLetter) *deadLetterColumns {
	n := len(ds)
	c := &deadLetterColumns{topic: make([]string, n), errText: make([]string, n),
		partition: make([]int32, n), offset: make([]int64, n), raw: make([][]byte, n)}
	for i, d := range ds {
		raw := d.Raw
		if raw == nil {
			raw = []byte{} // NOT NULL: an empty message is still a message
		}
		c.topic[i], c.errText[i] = cleanText(d.Topic), cleanText(d.Error)
		c.partition[i], c.offset[i], c.raw[i] = int32(d.Partition), d.Offset, raw
	}
	return c
}

// cleanText makes s storable as text: invalid UTF-8 and NUL bytes become
// U+FFFD. A dead letter's error often quotes the bad input.
func cleanText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

func (c *deadLetterColumns) len() int { return len(c.topic) }

func (c *deadLetterColumns) slice(i, j int) []any {
	return []any{c.topic[i:j], c.partition[i:j], c.offset[i:j], c.raw[i:j], c.errText[i:j]}
}
