package archivequery

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Ban is one row of the bans table: a ban, an unban or a warning.
type Ban struct {
	BanID     string
	TS        time.Time
	Action    string
	Scope     string
	Subject   string
	Reason    string
	Count     int64
	Threshold int64
	WindowS   int64
	DurationS int64
	ExpiresAt *time.Time // nil: an unban, a warning, or permanent
	Source    string
	DryRun    bool
	Note      string // the operator's reason, "" when none
	Actor     string // who acted, on an admin ban or unban; "" when unknown
	Evidence  Evidence
}

// Evidence is what a ban was decided on, as the ban message carried it.
type Evidence struct {
	FirstTS         *time.Time `json:"first_ts"`
	LastTS          *time.Time `json:"last_ts"`
	SampleEndpoints []string   `json:"sample_endpoints"`
	SampleUsers     []string   `json:"sample_users"`
	SampleSources   []string   `json:"sample_sources"`
	SparedSources   []string   `json:"spared_sources"`
}

// maxBans bounds a list of bans.
const maxBans = 500

const banColumns = `ban_id, ts, action, scope, subject, reason, count, threshold, window_s, duration_s,
	expires_at, source, dry_run, coalesce(note, ''), coalesce(actor, ''), evidence`

func scanBan(row pgx.CollectableRow) (Ban, error) {
	var b Ban
	var evidence []byte
	err := row.Scan(&b.BanID, &b.TS, &b.Action, &b.Scope, &b.Subject, &b.Reason, &b.Count, &b.Threshold,
		&b.WindowS, &b.DurationS, &b.ExpiresAt, &b.Source, &b.DryRun, &b.Note, &b.Actor, &evidence)
	if err == nil && len(evidence) > 0 {
		err = json.Unmarshal(evidence, &b.Evidence)
	}
	return b, err
}

// BansOf returns the ban messages about subject in scope between from and
// to, the newest first: an IP scope with a prefix (a/n) covers the bans of
// the prefix and of the addresses in it.
func (r *Reader) BansOf(ctx context.Context, s Subject, from, to time.Time) ([]Ban, error) {
	query := `SELECT ` + banColumns + ` FROM bans WHERE scope = $1 AND subject = $2 AND ts >= $3 AND ts < $4
		ORDER BY ts DESC, ban_id LIMIT $5`
	args := []any{s.Scope, s.Value, from, to, maxBans}
	if s.Scope == "ip" && strings.Contains(s.Value, "/") {
		// starts_with first: a cheap test that passes over most rows
		// before the regular expression and the cast.
		query = `SELECT ` + banColumns + ` FROM bans WHERE scope = $1 AND starts_with(subject, $7)
			AND CASE WHEN subject ~ $6 THEN subject::inet <<= $2::inet ELSE false END
			AND ts >= $3 AND ts < $4 ORDER BY ts DESC, ban_id LIMIT $5`
		args = append(args, inetSyntax, textPrefix(s.Value))
	}
	release, err := r.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	rows, err := r.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("bans of the subject: %w", err)
	}
	return pgx.CollectRows(rows, scanBan)
}

// textPrefix returns what every IPv4 subject in prefix (as ParseSubject
// leaves it: masked, at most a /16) begins with, as the limiters write
// addresses: its whole leading octets and a dot ("203.0.113." for a /24,
// "203.0." for a /16 to /23). An IPv6 prefix has none ("": IPv6 is
// written in several ways), nor has anything that is no prefix.
func textPrefix(prefix string) string {
	p, err := netip.ParsePrefix(prefix)
	if err != nil || !p.Addr().Is4() {
		return ""
	}
	octets := p.Addr().As4()
	var b strings.Builder
	for _, o := range octets[:min(p.Bits()/8, 3)] {
		b.WriteString(strconv.Itoa(int(o)))
		b.WriteByte('.')
	}
	return b.String()
}

// inetSyntax matches the subjects a prefix's ban history casts to inet: an
// IPv4 or IPv6 address, or a prefix, strictly written, so the cast cannot
// fail. The bans table takes any text as an ip subject (the topic is
// written by several producers), and Postgres 15 has no cast that returns
// null on bad input: one row that is no address would otherwise fail every
// prefix's history. A subject it skips is no address the console can ask
// about; IPv4-mapped IPv6 is skipped too (the limiters write IPv4).
const inetSyntax = `^(` + ipv4Syntax + `(/(3[0-2]|[12]?[0-9]))?|` + ipv6Syntax + `(/(12[0-8]|1[01][0-9]|[1-9]?[0-9]))?)$`

const (
	octet      = `(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])`
	ipv4Syntax = octet + `(\.` + octet + `){3}`
	hextet     = `[0-9a-fA-F]{1,4}`
	ipv6Syntax = `((` + hextet + `:){7}` + hextet +
		`|(` + hextet + `:){1,7}:` +
		`|(` + hextet + `:){1,6}:` + hextet +
		`|(` + hextet + `:){1,5}(:` + hextet + `){1,2}` +
		`|(` + hextet + `:){1,4}(:` + hextet + `){1,3}` +
		`|(` + hextet + `:){1,3}(:` + hextet + `){1,4}` +
		`|(` + hextet + `:){1,2}(:` + hextet + `){1,5}` +
		`|` + hextet + `:(:` + hextet + `){1,6}` +
		`|:((:` + hextet + `){1,7}|:))`
)

// AuditEntry is one action of a person: a manual ban or unban, or a change
// of the dynamic rules.
type AuditEntry struct {
	At      time.Time
	Actor   string
	Action  string // ban, unban, rule put, rule delete
	Scope   string // ip, user, or rule
	Subject string // the banned subject, or the rule id
	Detail  string // the reason, the duration
}

// Audit returns the people's actions before before, the newest first, at
// most limit.
func (r *Reader) Audit(ctx context.Context, before time.Time, limit int) ([]AuditEntry, error) {
	release, err := r.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	rows, err := r.pool.Query(ctx, `
		(SELECT ts, coalesce(actor, ''), action, scope, subject,
			concat_ws(' ', CASE WHEN action = 'ban' THEN 'for ' || duration_s || 's' END, note)
		 FROM bans WHERE source = 'admin' AND ts < $1 ORDER BY ts DESC LIMIT $2)
		UNION ALL
		(SELECT changed_at, actor, 'rule ' || action, 'rule', rule_id, 'version ' || version || ' from ' || source_addr
		 FROM rule_changes WHERE changed_at < $1 ORDER BY changed_at DESC LIMIT $2)
		ORDER BY 1 DESC LIMIT $2`, before, limit)
	if err != nil {
		return nil, fmt.Errorf("audit trail: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (AuditEntry, error) {
		var e AuditEntry
		err := row.Scan(&e.At, &e.Actor, &e.Action, &e.Scope, &e.Subject, &e.Detail)
		return e, err
	})
}
