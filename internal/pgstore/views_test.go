package pgstore

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ratewarden/ratewarden/internal/archiver"
	"github.com/ratewarden/ratewarden/internal/event"
)

func TestTopOffenders1h(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	now := time.Now().UTC()
	at := func(ago time.Duration, ip, user, endpoint string, shadow bool) archiver.Violation {
		v := violation(0, now.Add(-ago))
		v.IP, v.UserID, v.Endpoint, v.Shadow = ip, user, endpoint, shadow
		return v
	}
	vs := []archiver.Violation{
		at(50*time.Minute, "203.0.113.1", "u-1", "/a", false),
		at(30*time.Minute, "203.0.113.1", "u-2", "/b", false),
		at(10*time.Minute, "203.0.113.1", "u-2", "/a", false),
		at(5*time.Minute, "203.0.113.1", "u-3", "/c", true), // shadow: not a real denial
		at(2*time.Hour, "203.0.113.1", "u-1", "/d", false),  // older than an hour
		at(20*time.Minute, "2001:db8::2", "", "/a", false),
		at(90*time.Minute, "198.51.100.9", "u-9", "/a", false), // only old rows: absent
	}
	for i := range vs {
		vs[i].EventID = violation(i, now).EventID
	}
	if _, err := s.Write(ctx, archiver.Batch{Violations: vs}); err != nil {
		t.Fatal(err)
	}

	type offender struct {
		IP                           string
		Violations, Endpoints, Users int
		FirstSeen, LastSeen          time.Time
	}
	rows, err := s.pool.Query(ctx, `SELECT host(ip_address), violations, distinct_endpoints, distinct_users, first_seen, last_seen
		FROM top_offenders_1h`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (offender, error) {
		var o offender
		err := r.Scan(&o.IP, &o.Violations, &o.Endpoints, &o.Users, &o.FirstSeen, &o.LastSeen)
		return o, err
	})
	if err != nil {
		t.Fatal(err)
	}
	us := func(t time.Time) time.Time { return t.Truncate(time.Microsecond) }
	want := []offender{
		{"203.0.113.1", 3, 2, 2, us(vs[0].OccurredAt), us(vs[2].OccurredAt)},
		{"2001:db8::2", 1, 1, 0, us(vs[5].OccurredAt), us(vs[5].OccurredAt)},
	}
	if len(got) != len(want) {
		t.Fatalf("top_offenders_1h = %+v, want %+v", got, want)
	}
	for i := range want {
		g := got[i]
		if g.IP != want[i].IP || g.Violations != want[i].Violations || g.Endpoints != want[i].Endpoints ||
			g.Users != want[i].Users || !g.FirstSeen.Equal(want[i].FirstSeen) || !g.LastSeen.Equal(want[i].LastSeen) {
			t.Errorf("row %d = %+v, want %+v", i, g, want[i])
		}
	}
}

func TestViolationsPerEndpointHourly(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	h10 := time.Now().UTC().Truncate(time.Hour).Add(-24 * time.Hour) // an hour of yesterday, whatever the date
	at := func(i int, min int, endpoint, rule string, shadow bool) archiver.Violation {
		v := violation(i, h10.Add(time.Duration(min)*time.Minute))
		v.Endpoint, v.RuleID, v.Shadow = endpoint, rule, shadow
		return v
	}
	if _, err := s.Write(ctx, archiver.Batch{Violations: []archiver.Violation{
		at(1, 5, "/a", "r1", false), at(2, 55, "/a", "r1", false), at(3, 30, "/a", "r1", true),
		at(4, 60, "/a", "r1", false), at(5, 10, "/b", "r2", false), at(6, 15, "/a", "r2", true),
	}}); err != nil {
		t.Fatal(err)
	}

	// In a session whose time zone is 5:30 off UTC, hours stay UTC hours.
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET TIME ZONE 'Asia/Kolkata'"); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, "RESET TIME ZONE")
	type row struct {
		Hour               time.Time
		Endpoint, Rule     string
		Violations, Shadow int
	}
	rows, err := conn.Query(ctx, `SELECT hour, endpoint, rule_id, violations, shadow_violations
		FROM violations_per_endpoint_hourly ORDER BY hour, endpoint, rule_id`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.Hour, &x.Endpoint, &x.Rule, &x.Violations, &x.Shadow)
		x.Hour = x.Hour.UTC()
		return x, err
	})
	if err != nil {
		t.Fatal(err)
	}
	h11 := h10.Add(time.Hour)
	want := []row{
		{h10, "/a", "r1", 2, 1},
		{h10, "/a", "r2", 0, 1},
		{h10, "/b", "r2", 1, 0},
		{h11, "/a", "r1", 1, 0},
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations_per_endpoint_hourly =\n%+v\nwant\n%+v", got, want)
	}
}

func TestActiveBans(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	now := time.Now().UTC()
	n := 0
	b := func(action, scope, subject string, ago, expiresIn time.Duration, dryRun bool) event.Ban {
		n++
		x := ban("ban-"+string(rune('a'+n)), now.Add(-ago))
		x.Action, x.Scope, x.Subject, x.DryRun = action, scope, subject, dryRun
		x.ExpiresAt = time.Time{}
		if expiresIn != 0 {
			x.ExpiresAt = now.Add(expiresIn)
		}
		return x
	}
	const ban, unban, warn = event.ActionBan, event.ActionUnban, event.ActionWarn
	m := time.Minute
	bans := []event.Ban{
		b(ban, "ip", "1.1.1.1", 10*m, 50*m, false), // active
		b(ban, "ip", "2.2.2.2", 10*m, 50*m, false), // lifted
		b(unban, "ip", "2.2.2.2", 5*m, 0, false),
		b(ban, "ip", "3.3.3.3", 2*time.Hour, -time.Hour, false), // expired
		b(ban, "ip", "4.4.4.4", 10*m, 50*m, true),               // dry run
		b(ban, "ip", "5.5.5.5", 10*m, 50*m, false),              // a later warning changes nothing
		b(warn, "ip", "5.5.5.5", 1*m, 0, false),
		b(ban, "ip", "6.6.6.6", 20*m, 40*m, false), // a dry-run unban changes nothing
		b(unban, "ip", "6.6.6.6", 5*m, 0, true),
		b(unban, "ip", "7.7.7.7", 20*m, 0, false), // unbanned, then banned again
		b(ban, "ip", "7.7.7.7", 5*m, 55*m, false),
		b(ban, "user", "u-9", 10*m, 0, false),                // no expiry: permanent
		b(ban, "ip", "2001:db8:1:2::/64", 10*m, 50*m, false), // an IPv6 prefix (detection.ipv6_prefix)
		b(ban, "ip", "2001:db8:9::/48", 10*m, 50*m, false),   // lifted
		b(unban, "ip", "2001:db8:9::/48", 5*m, 0, false),
	}
	if _, err := s.Write(ctx, archiver.Batch{Bans: bans}); err != nil {
		t.Fatal(err)
	}
	rows, err := s.pool.Query(ctx, "SELECT scope || ':' || subject FROM active_bans ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ip:1.1.1.1", "ip:2001:db8:1:2::/64", "ip:5.5.5.5", "ip:6.6.6.6", "ip:7.7.7.7", "user:u-9"}
	if !slices.Equal(got, want) {
		t.Errorf("active_bans = %v, want %v", got, want)
	}
}
