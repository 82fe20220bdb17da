package pgstore

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ratewarden/ratewarden/internal/archiver"
	"github.com/ratewarden/ratewarden/internal/event"
)

func TestWriteOutcomesIdempotent(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	now := time.Now().UTC()
	const n = 300
	var b archiver.Batch
	for i := range n {
		b.Outcomes = append(b.Outcomes, outcome(i, now.Add(-time.Duration(i)*time.Second)))
	}
	if res, err := s.Write(ctx, b); err != nil || res != (archiver.Result{Outcomes: n}) {
		t.Fatalf("first write: %+v, %v; want %d outcomes", res, err, n)
	}
	if res, err := s.Write(ctx, b); err != nil || res != (archiver.Result{Duplicates: n}) {
		t.Fatalf("same batch again: %+v, %v; want %d duplicates", res, err, n)
	}
	// Duplicates inside one batch, and a batch half old, half new.
	b2 := archiver.Batch{Outcomes: append(append([]event.Outcome{}, b.Outcomes[:10]...), outcome(n, now), outcome(n, now))}
	if res, err := s.Write(ctx, b2); err != nil || res != (archiver.Result{Outcomes: 1, Duplicates: 11}) {
		t.Fatalf("mixed batch: %+v, %v; want 1 outcome, 11 duplicates", res, err)
	}
	if got := queryInt(t, s, "SELECT count(*) FROM outcomes"); got != n+1 {
		t.Errorf("%d rows, want %d", got, n+1)
	}

	// Every column arrives as written.
	o := outcome(n+1, now)
	o.UserID, o.IP, o.Method, o.Tier, o.Status, o.Cost, o.Banned, o.UserBanned = "", "2001:db8::1", "", "", 599, 1<<53-1, true, true
	if _, err := s.Write(ctx, archiver.Batch{Outcomes: []event.Outcome{o}}); err != nil {
		t.Fatal(err)
	}
	var got event.Outcome
	var userID *string
	err := s.pool.QueryRow(ctx, `SELECT event_id::text, occurred_at, user_id, host(ip_address), endpoint, http_method,
		user_tier, status, cost, banned, instance, user_banned FROM outcomes WHERE event_id = $1`, o.EventID).Scan(
		&got.EventID, &got.TS, &userID, &got.IP, &got.Endpoint, &got.Method, &got.Tier, &got.Status, &got.Cost,
		&got.Banned, &got.Instance, &got.UserBanned)
	if err != nil {
		t.Fatal(err)
	}
	if userID != nil {
		t.Errorf("anonymous user_id stored as %q, want NULL", *userID)
	}
	got.TS = got.TS.UTC()
	want := o
	want.TS = o.TS.Truncate(time.Microsecond)
	if got != want {
		t.Errorf("stored\n%+v\nwant\n%+v", got, want)
	}
}

func TestWriteRejectsInvalidOutcomeWholeBatch(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	now := time.Now().UTC()
	bad := outcome(1, now)
	bad.EventID = "not-a-uuid"
	_, err := s.Write(ctx, archiver.Batch{
		Violations: []archiver.Violation{violation(0, now)},
		Outcomes:   []event.Outcome{outcome(0, now), bad},
	})
	var rowErr *archiver.RowError
	if !errors.As(err, &rowErr) || rowErr.Table != "outcomes" || rowErr.Index != 1 {
		t.Fatalf("Write = %v, want a RowError for outcomes row 1", err)
	}
	if n := queryInt(t, s, "SELECT (SELECT count(*) FROM rate_limit_violations) + (SELECT count(*) FROM outcomes)"); n != 0 {
		t.Errorf("%d rows stored, want none", n)
	}
}

func TestValidateOutcome(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name   string
		change func(*event.Outcome)
		want   string // "" for valid
	}{
		{"valid", func(*event.Outcome) {}, ""},
		{"ipv6, anonymous, no method", func(o *event.Outcome) { o.IP, o.UserID, o.Method = "2001:db8::1", "", "" }, ""},
		{"event id not a uuid", func(o *event.Outcome) { o.EventID = "evt-1" }, "event_id"},
		{"ip with zone", func(o *event.Outcome) { o.IP = "fe80::1%eth0" }, "zone"},
		{"bad ip", func(o *event.Outcome) { o.IP = "203.0.113.300" }, "ip"},
		{"zero time", func(o *event.Outcome) { o.TS = time.Time{} }, "ts"},
		{"time beyond timestamptz", func(o *event.Outcome) { o.TS = time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC) }, "range"},
		{"status beyond smallint", func(o *event.Outcome) { o.Status = 40000 }, "status"},
		{"nul in endpoint", func(o *event.Outcome) { o.Endpoint = "/a\x00" }, "endpoint"},
		{"invalid utf-8 in tier", func(o *event.Outcome) { o.Tier = "\xff" }, "tier"},
		{"nul in instance", func(o *event.Outcome) { o.Instance = "\x00" }, "instance"},
		{"user id too long", func(o *event.Outcome) { o.UserID = strings.Repeat("u", 4000) }, "user_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := outcome(1, now)
			tc.change(&o)
			err := validateOutcome(o)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("validateOutcome = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("validateOutcome = %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}

// TestOutcomePartitions: the partition maintenance covers outcomes like
// rate_limit_violations: daily partitions made ahead, a row beyond them
// caught by DEFAULT and moved when its day comes, old days dropped.
func TestOutcomePartitions(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	now := time.Now().UTC()
	d := func(days int) string { return "outcomes_" + now.AddDate(0, 0, days).Format("20060102") }

	if err := s.EnsurePartitions(ctx, now, 1); err != nil {
		t.Fatal(err)
	}
	if got, want := partitions(t, s, "outcomes"), []string{d(-1), d(0), d(1), "outcomes_default"}; !slices.Equal(got, want) {
		t.Fatalf("partitions %v, want %v", got, want)
	}

	today, future, ancient := outcome(1, now), outcome(2, now.AddDate(0, 0, 5)), outcome(3, now.AddDate(-1, 0, 0))
	if _, err := s.Write(ctx, archiver.Batch{Outcomes: []event.Outcome{today, future, ancient}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		o    event.Outcome
		want string
	}{{today, d(0)}, {future, "outcomes_default"}, {ancient, "outcomes_default"}} {
		if got := outcomePartition(t, s, tc.o); got != tc.want {
			t.Errorf("row at %s landed in %s, want %s", tc.o.TS, got, tc.want)
		}
	}

	// The future row's day comes: it moves into its new partition.
	if err := s.EnsurePartitions(ctx, now.AddDate(0, 0, 4), 1); err != nil {
		t.Fatal(err)
	}
	if got := outcomePartition(t, s, future); got != d(5) {
		t.Errorf("future row in %s after its partition was created, want %s", got, d(5))
	}
	// Created or attached, a partition has the parent's indexes.
	for _, p := range []string{d(0), d(5)} {
		if n := queryInt(t, s, "SELECT count(*) FROM pg_indexes WHERE tablename = $1", p); n != 4 {
			t.Errorf("%s has %d indexes, want 4 (primary key, failures, and the console's by address and by user)", p, n)
		}
	}

	// Six days on with 5 days of retention, the days ending by now+1d go:
	// yesterday's and today's, of both tables.
	dropped, err := s.DropPartitions(ctx, now.AddDate(0, 0, 6), 5)
	if err != nil {
		t.Fatal(err)
	}
	v := func(days int) string { return "rate_limit_violations_" + now.AddDate(0, 0, days).Format("20060102") }
	if want := []string{v(-1), v(0), d(-1), d(0)}; !slices.Equal(dropped, want) {
		t.Errorf("dropped %v, want %v", dropped, want)
	}
	rows, err := s.pool.Query(ctx, "SELECT event_id::text FROM outcomes ORDER BY occurred_at")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	// Today's row went with its partition, the ancient one out of DEFAULT.
	if want := []string{future.EventID}; !slices.Equal(ids, want) {
		t.Errorf("rows left %v, want %v", ids, want)
	}
}

// outcomePartition is the partition an outcome row landed in.
func outcomePartition(t *testing.T, s *Store, o event.Outcome) string {
	t.Helper()
	return queryString(t, s, "SELECT tableoid::regclass::text FROM outcomes WHERE event_id = $1", o.EventID)
}

func TestFailuresPerEndpointHourly(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	h := time.Now().UTC().Truncate(time.Hour).Add(-24 * time.Hour) // an hour of yesterday, whatever the date
	n := 0
	at := func(min int, endpoint string, status int, ip, user string, banned bool) event.Outcome {
		n++
		o := outcome(n, h.Add(time.Duration(min)*time.Minute))
		o.Endpoint, o.Status, o.IP, o.UserID, o.Banned = endpoint, status, ip, user, banned
		return o
	}
	const a, b, c = "203.0.113.1", "203.0.113.2", "2001:db8::3"
	if _, err := s.Write(ctx, archiver.Batch{Outcomes: []event.Outcome{
		at(5, "/login", 401, a, "u-1", false),
		at(10, "/login", 401, a, "u-2", false),
		at(20, "/login", 401, b, "u-1", false),
		at(30, "/login", 429, b, "", false),    // anonymous: no user to count
		at(40, "/login", 200, a, "u-1", false), // a success
		at(41, "/login", 302, a, "u-1", false), // not a failure either
		at(45, "/login", 401, c, "u-4", true),  // banned: the ban's refusal
		at(50, "/login", 400, c, "u-3", false),
		at(15, "/books", 404, c, "u-3", false),
		at(60, "/login", 500, a, "u-1", false), // the next hour
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
		Hour                     time.Time
		Endpoint                 string
		Status                   int
		Failures, Sources, Users int
	}
	rows, err := conn.Query(ctx, `SELECT hour, endpoint, status, failures, distinct_sources, distinct_users
		FROM failures_per_endpoint_hourly ORDER BY hour, endpoint, status`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.Hour, &x.Endpoint, &x.Status, &x.Failures, &x.Sources, &x.Users)
		x.Hour = x.Hour.UTC()
		return x, err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []row{
		{h, "/books", 404, 1, 1, 1},
		{h, "/login", 400, 1, 1, 1},
		{h, "/login", 401, 3, 2, 2},
		{h, "/login", 429, 1, 1, 0},
		{h.Add(time.Hour), "/login", 500, 1, 1, 1},
	}
	if !slices.Equal(got, want) {
		t.Errorf("failures_per_endpoint_hourly =\n%+v\nwant\n%+v", got, want)
	}
}

func TestFailuresPerSource1h(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	now := time.Now().UTC()
	n := 0
	at := func(ago time.Duration, ip, user, endpoint string, status int, banned bool) event.Outcome {
		n++
		o := outcome(n, now.Add(-ago))
		o.IP, o.UserID, o.Endpoint, o.Status, o.Banned = ip, user, endpoint, status, banned
		return o
	}
	m := time.Minute
	outs := []event.Outcome{
		at(50*m, "203.0.113.1", "u-1", "/login", 401, false),
		at(30*m, "203.0.113.1", "u-2", "/login", 401, false),
		at(10*m, "203.0.113.1", "u-2", "/admin", 403, false),
		at(5*m, "203.0.113.1", "u-3", "/login", 200, false),       // a success
		at(20*m, "203.0.113.1", "u-4", "/other", 401, true),       // banned
		at(2*time.Hour, "203.0.113.1", "u-5", "/old", 401, false), // older than an hour
		at(20*m, "2001:db8::2", "", "/login", 429, false),
		at(90*m, "198.51.100.9", "u-9", "/login", 401, false),  // only old failures: absent
		at(15*m, "198.51.100.10", "u-8", "/login", 204, false), // only successes: absent
	}
	if _, err := s.Write(ctx, archiver.Batch{Outcomes: outs}); err != nil {
		t.Fatal(err)
	}

	type source struct {
		IP                         string
		Failures, Users, Endpoints int
		FirstSeen, LastSeen        time.Time
		Statuses                   []int16
	}
	rows, err := s.pool.Query(ctx, `SELECT host(ip_address), failures, distinct_users, distinct_endpoints,
		first_seen, last_seen, statuses FROM failures_per_source_1h`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (source, error) {
		var x source
		err := r.Scan(&x.IP, &x.Failures, &x.Users, &x.Endpoints, &x.FirstSeen, &x.LastSeen, &x.Statuses)
		return x, err
	})
	if err != nil {
		t.Fatal(err)
	}
	us := func(t time.Time) time.Time { return t.Truncate(time.Microsecond) }
	want := []source{
		{"203.0.113.1", 3, 2, 2, us(outs[0].TS), us(outs[2].TS), []int16{401, 403}},
		{"2001:db8::2", 1, 0, 1, us(outs[6].TS), us(outs[6].TS), []int16{429}},
	}
	if len(got) != len(want) {
		t.Fatalf("failures_per_source_1h = %+v, want %+v", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.IP != w.IP || g.Failures != w.Failures || g.Users != w.Users || g.Endpoints != w.Endpoints ||
			!g.FirstSeen.Equal(w.FirstSeen) || !g.LastSeen.Equal(w.LastSeen) || !slices.Equal(g.Statuses, w.Statuses) {
			t.Errorf("row %d = %+v, want %+v", i, g, w)
		}
	}
}
