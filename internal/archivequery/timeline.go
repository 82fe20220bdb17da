package archivequery

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Subject is what the subject page is about: an address or a prefix
// (scope ip), or a user id or account key (scope user).
type Subject struct {
	Scope string // ip or user
	Value string
}

// The widest prefixes the subject page reads: a wider one aggregates a
// large part of the archive in one page (0.0.0.0/0 is all of it), holding
// database connections that other users' pages and the readiness probe
// need. A /16 is a large network already; an IPv6 /32 is one provider's.
const (
	widestIPv4 = 16
	widestIPv6 = 32
)

// ParseSubject checks a subject given by a person: an IP address or prefix
// for scope ip (kept as written, masked, at most an IPv4 /16 or an IPv6
// /32 wide), any text of 1 to 512 bytes for scope user.
func ParseSubject(scope, value string) (Subject, error) {
	value = strings.TrimSpace(value)
	switch scope {
	case "ip":
		if addr, err := netip.ParseAddr(value); err == nil {
			return Subject{Scope: scope, Value: addr.Unmap().String()}, nil
		}
		p, err := netip.ParsePrefix(value)
		if err != nil {
			return Subject{}, fmt.Errorf("an IP address or prefix, such as 203.0.113.7 or 2001:db8::/64")
		}
		if widest := widestOf(p.Addr()); p.Bits() < widest {
			return Subject{}, fmt.Errorf("a prefix of at most /%d (IPv4) or /%d (IPv6): %s covers too much of the archive for one page", widestIPv4, widestIPv6, p.Masked())
		}
		return Subject{Scope: scope, Value: p.Masked().String()}, nil
	case "user":
		if value == "" || len(value) > 512 {
			return Subject{}, fmt.Errorf("a user id of 1 to 512 bytes")
		}
		return Subject{Scope: scope, Value: value}, nil
	}
	return Subject{}, fmt.Errorf("scope: ip or user")
}

// widestOf is the shortest prefix length ParseSubject reads in a's family
// (an IPv4-mapped prefix is an IPv4 one written long).
func widestOf(a netip.Addr) int {
	switch {
	case a.Is4():
		return widestIPv4
	case a.Is4In6():
		return 96 + widestIPv4
	}
	return widestIPv6
}

// Bucket is one step of a timeline: what happened to the subject from At
// for the timeline's step.
type Bucket struct {
	At              time.Time
	Violations      int64 // requests refused (or that a shadow rule would have refused) by a rate limit
	BannedRefusals  int64 // requests refused because the subject was banned
	Outcomes        int64 // outcome reports
	OutcomeFailures int64 // of those, with a status of 400 or more
}

// Timeline is a subject's activity over a range, in equal steps.
type Timeline struct {
	From, To time.Time
	Step     time.Duration
	Buckets  []Bucket // one per step, from From
}

// Steps is the number of buckets of a timeline.
const Steps = 60

// Timeline returns the subject's violations and outcomes between from and
// to in Steps buckets. The range filter is on occurred_at, so only the
// partitions of the range are read.
func (r *Reader) Timeline(ctx context.Context, s Subject, from, to time.Time) (Timeline, error) {
	step := max(to.Sub(from)/Steps, time.Second)
	t := Timeline{From: from, To: to, Step: step, Buckets: make([]Bucket, (to.Sub(from)+step-1)/step)}
	release, err := r.acquire(ctx)
	if err != nil {
		return t, err
	}
	defer release()
	match := "user_id = $1"
	switch {
	case s.Scope == "ip" && strings.Contains(s.Value, "/"):
		match = "ip_address <<= $1::inet"
	case s.Scope == "ip":
		match = "ip_address = $1::inet"
	}
	index := func(at time.Time) int { return int(at.Sub(from) / step) }
	rows, err := r.pool.Query(ctx, `SELECT date_bin($2, occurred_at, $3) AS at,
			count(*) FILTER (WHERE reason <> 'banned'), count(*) FILTER (WHERE reason = 'banned')
		FROM rate_limit_violations WHERE `+match+` AND occurred_at >= $3 AND occurred_at < $4
		GROUP BY 1`, s.Value, step, from, to)
	if err != nil {
		return t, fmt.Errorf("violations of the subject: %w", err)
	}
	err = forEach(rows, func(row pgx.CollectableRow) error {
		var at time.Time
		var v, b int64
		if err := row.Scan(&at, &v, &b); err != nil {
			return err
		}
		if i := index(at); i >= 0 && i < len(t.Buckets) {
			t.Buckets[i].Violations, t.Buckets[i].BannedRefusals = v, b
		}
		return nil
	})
	if err != nil {
		return t, fmt.Errorf("violations of the subject: %w", err)
	}
	rows, err = r.pool.Query(ctx, `SELECT date_bin($2, occurred_at, $3) AS at, count(*), count(*) FILTER (WHERE status >= 400)
		FROM outcomes WHERE `+match+` AND occurred_at >= $3 AND occurred_at < $4
		GROUP BY 1`, s.Value, step, from, to)
	if err != nil {
		return t, fmt.Errorf("outcomes of the subject: %w", err)
	}
	err = forEach(rows, func(row pgx.CollectableRow) error {
		var at time.Time
		var n, f int64
		if err := row.Scan(&at, &n, &f); err != nil {
			return err
		}
		if i := index(at); i >= 0 && i < len(t.Buckets) {
			t.Buckets[i].Outcomes, t.Buckets[i].OutcomeFailures = n, f
		}
		return nil
	})
	if err != nil {
		return t, fmt.Errorf("outcomes of the subject: %w", err)
	}
	for i := range t.Buckets {
		t.Buckets[i].At = from.Add(time.Duration(i) * step)
	}
	return t, nil
}

func forEach(rows pgx.Rows, f func(pgx.CollectableRow) error) error {
	_, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (struct{}, error) { return struct{}{}, f(row) })
	return err
}
