package archivequery

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/archiver"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/pgstore"
	"github.com/ratewarden/ratewarden/internal/testkit/pgtest"
)

// archive makes a migrated database with b written the archiver's way, and
// returns a reader of it.
func archive(t testing.TB, batches ...archiver.Batch) (*Reader, *pgstore.Store) {
	t.Helper()
	ctx := context.Background()
	db := pgtest.Database(t)
	store, err := pgstore.OpenMigrated(ctx, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	if err := store.EnsurePartitions(ctx, time.Now(), 2); err != nil {
		t.Fatal(err)
	}
	for _, b := range batches {
		if _, err := store.Write(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	r, err := Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r, store
}

var next int

func violation(at time.Time, ip, user, rule, reason string) archiver.Violation {
	next++
	return archiver.Violation{EventID: fmt.Sprintf("00000000-0000-4000-8000-%012d", next), OccurredAt: at, UserID: user, IP: ip,
		Endpoint: "/api/login", Method: "POST", Tier: "BASIC", RuleID: rule, Algorithm: "fixed_window", Reason: reason,
		Limit: 5, CurrentCount: 5, Instance: "limiter-1"}
}

func outcome(at time.Time, ip, user string, status int) event.Outcome {
	next++
	return event.Outcome{EventID: fmt.Sprintf("00000000-0000-7000-8000-%012d", next), TS: at, Instance: "limiter-1",
		UserID: user, IP: ip, Endpoint: "/api/login", Method: "POST", Tier: "BASIC", Status: status, Cost: 1}
}

func detectorBan(id string, at time.Time, subject, reason string) event.Ban {
	return event.Ban{BanID: id, TS: at, Action: event.ActionBan, Scope: event.ScopeIP, Subject: subject, Reason: reason,
		Count: 7, Threshold: 5, WindowS: 3600, DurationS: 3600, ExpiresAt: at.Add(time.Hour), Source: "detector",
		Evidence: event.Evidence{FirstTS: at.Add(-time.Minute), LastTS: at, SampleEndpoints: []string{"/a", "/b"}}}
}

// A subject's timeline counts its violations, refusals for a ban and
// outcomes in the step they fell in; an address is itself, a prefix the
// addresses in it, a user id that id.
func TestTimeline(t *testing.T) {
	to := time.Now().UTC().Truncate(time.Minute)
	from := to.Add(-time.Hour)
	step := time.Hour / Steps
	b := archiver.Batch{
		Violations: []archiver.Violation{
			violation(from.Add(30*time.Second), "203.0.113.7", "u-1", "r", event.ReasonRateLimited),
			violation(from.Add(40*time.Second), "203.0.113.7", "", "r", event.ReasonRateLimited),
			violation(from.Add(3*step+time.Second), "203.0.113.7", "", "r", event.ReasonBanned),
			violation(from.Add(3*step+time.Second), "203.0.113.8", "u-1", "r", event.ReasonRateLimited),
			violation(from.Add(-time.Second), "203.0.113.7", "", "r", event.ReasonRateLimited), // before the range
			violation(to, "203.0.113.7", "", "r", event.ReasonRateLimited),                     // at its end: out
		},
		Outcomes: []event.Outcome{outcome(from.Add(59*step), "203.0.113.7", "u-1", 401), outcome(from.Add(59*step), "203.0.113.7", "", 200)},
	}
	r, _ := archive(t, b)
	tests := []struct {
		scope, value string
		want         map[int]Bucket // the non-empty buckets
	}{
		{"ip", "203.0.113.7", map[int]Bucket{0: {Violations: 2}, 3: {BannedRefusals: 1}, 59: {Outcomes: 2, OutcomeFailures: 1}}},
		{"ip", "203.0.113.0/24", map[int]Bucket{0: {Violations: 2}, 3: {Violations: 1, BannedRefusals: 1}, 59: {Outcomes: 2, OutcomeFailures: 1}}},
		{"user", "u-1", map[int]Bucket{0: {Violations: 1}, 3: {Violations: 1}, 59: {Outcomes: 1, OutcomeFailures: 1}}},
		{"ip", "198.51.100.1", nil},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			s, err := ParseSubject(tt.scope, tt.value)
			if err != nil {
				t.Fatal(err)
			}
			tl, err := r.Timeline(context.Background(), s, from, to)
			if err != nil {
				t.Fatal(err)
			}
			if len(tl.Buckets) != Steps || tl.Step != step || !tl.Buckets[1].At.Equal(from.Add(step)) {
				t.Fatalf("%d buckets of %v", len(tl.Buckets), tl.Step)
			}
			for i, got := range tl.Buckets {
				want := tt.want[i]
				want.At = got.At
				if got != want {
					t.Errorf("bucket %d: %+v, want %+v", i, got, want)
				}
			}
		})
	}
}

func TestParseSubject(t *testing.T) {
	for _, tt := range []struct{ scope, in, want string }{
		{"ip", " 203.0.113.7 ", "203.0.113.7"}, {"ip", "::ffff:203.0.113.7", "203.0.113.7"},
		{"ip", "2001:db8::1:2/64", "2001:db8::/64"}, {"user", "<b>x</b>", "<b>x</b>"},
	} {
		if s, err := ParseSubject(tt.scope, tt.in); err != nil || s.Value != tt.want {
			t.Errorf("%s %q: %+v %v, want %q", tt.scope, tt.in, s, err, tt.want)
		}
	}
	for _, bad := range [][2]string{{"ip", "nohost"}, {"ip", ""}, {"user", ""}, {"planet", "x"}} {
		if _, err := ParseSubject(bad[0], bad[1]); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// The overview counts the bans of the hour and the day by scenario, and the
// denials of the hour by rule (shadow ones apart); the audit trail lists
// the people's bans, lifts and rule changes with who and why, newest
// first; a subject's ban history covers a prefix's addresses.
func TestOverviewAuditAndBanHistory(t *testing.T) {
	now := time.Now().UTC()
	manual := event.Ban{BanID: "m-1", TS: now.Add(-3 * time.Minute), Action: event.ActionBan, Scope: event.ScopeUser, Subject: "<script>",
		Reason: "manual", DurationS: 600, ExpiresAt: now.Add(7 * time.Minute), Source: "admin", Note: "incident 7", Actor: "ana"}
	lift := event.Ban{BanID: "m-2", TS: now.Add(-2 * time.Minute), Action: event.ActionUnban, Scope: event.ScopeIP, Subject: "203.0.113.7",
		Reason: "manual", Source: "admin", Note: "false positive", Actor: "bo"}
	shadow := violation(now.Add(-time.Minute), "203.0.113.9", "", "shadowed", event.ReasonRateLimited)
	shadow.Shadow = true
	b := archiver.Batch{
		Bans: []event.Ban{detectorBan("d-1", now.Add(-10*time.Minute), "203.0.113.7", "scan"),
			detectorBan("d-2", now.Add(-5*time.Hour), "203.0.113.8", "violations_1h"),
			detectorBan("d-3", now.Add(-30*time.Minute), "203.0.113.9", "scan"), manual, lift},
		Violations: []archiver.Violation{violation(now.Add(-time.Minute), "203.0.113.9", "", "login", event.ReasonRateLimited),
			violation(now.Add(-time.Minute), "203.0.113.9", "", "login", event.ReasonBanned),
			violation(now.Add(-2*time.Hour), "203.0.113.9", "", "old", event.ReasonRateLimited), shadow},
	}
	r, store := archive(t, b)
	ctx := context.Background()
	if _, err := store.Pool().Exec(ctx, `INSERT INTO rule_changes (version, rule_id, action, actor, source_addr, instance, changed_at, after)
		VALUES (1, 'login', 'put', 'cy', '192.0.2.1', 'limiter-1', $1, '{}')`, now.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}

	o, err := r.Overview(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(o.BansHour) != "[{scan 2} {manual 1}]" || fmt.Sprint(o.BansDay) != "[{scan 2} {manual 1} {violations_1h 1}]" ||
		fmt.Sprint(o.DenialsByRule) != "[{login 2}]" || o.ActiveBans != 2 { // d-1 lifted, d-2 expired
		t.Fatalf("overview %+v", o)
	}

	entries, err := r.Audit(ctx, now.Add(time.Minute), 10)
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(entries)
	want := fmt.Sprintf("[{%v cy rule put rule login version 1 from 192.0.2.1} {%v bo unban ip 203.0.113.7 false positive} {%v ana ban user <script> for 600s incident 7}]",
		now.Add(-time.Minute).Truncate(time.Microsecond).Local(), lift.TS.Truncate(time.Microsecond).Local(), manual.TS.Truncate(time.Microsecond).Local())
	if got != want {
		t.Fatalf("audit\n got %s\nwant %s", got, want)
	}
	if older, err := r.Audit(ctx, lift.TS, 10); err != nil || len(older) != 1 || older[0].Actor != "ana" {
		t.Fatalf("the page before the lift: %v %v", older, err)
	}

	s, _ := ParseSubject("ip", "203.0.113.0/24")
	history, err := r.BansOf(ctx, s, now.Add(-time.Hour), now)
	if err != nil {
		t.Fatal(err)
	}
	if len(history) != 3 || history[0].BanID != "m-2" || history[0].Actor != "bo" || history[2].BanID != "d-3" ||
		fmt.Sprint(history[1].Evidence.SampleEndpoints) != "[/a /b]" || history[1].Threshold != 5 {
		t.Fatalf("the /24's bans in the hour: %+v", history)
	}
}

// The reader's sessions take the reader role and are read-only, whatever
// the login role (here the tests' superuser) may do.
func TestReaderIsReadOnly(t *testing.T) {
	r, _ := archive(t)
	ctx := context.Background()
	var role string
	if err := r.pool.QueryRow(ctx, "SELECT current_user").Scan(&role); err != nil || role != ReaderRole {
		t.Fatalf("current_user %q (%v), want %s", role, err, ReaderRole)
	}
	for _, write := range []string{
		`INSERT INTO dead_letters (topic, "partition", "offset", raw, error) VALUES ('t', 0, 0, '', 'x')`,
		`SET default_transaction_read_only = off; INSERT INTO dead_letters (topic, "partition", "offset", raw, error) VALUES ('t', 0, 0, '', 'x')`,
	} {
		if _, err := r.pool.Exec(ctx, write); err == nil {
			t.Fatalf("the reader wrote: %s", write)
		}
	}
}
