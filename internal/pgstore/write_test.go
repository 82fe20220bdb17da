package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ratewarden/ratewarden/internal/archiver"
	"github.com/ratewarden/ratewarden/internal/event"
)

func TestWriteViolationsIdempotent(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	now := time.Now().UTC()
	const n = 500
	var b archiver.Batch
	for i := range n {
		b.Violations = append(b.Violations, violation(i, now.Add(-time.Duration(i)*time.Second)))
	}

	res, err := s.Write(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if want := (archiver.Result{Violations: n}); res != want {
		t.Errorf("first write: %+v, want %+v", res, want)
	}
	res, err = s.Write(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if want := (archiver.Result{Duplicates: n}); res != want {
		t.Errorf("same batch again: %+v, want %+v", res, want)
	}
	if got := queryInt(t, s, "SELECT count(*) FROM rate_limit_violations"); got != n {
		t.Errorf("%d rows, want %d", got, n)
	}

	// Duplicates inside one batch, and a batch half old, half new.
	b2 := archiver.Batch{Violations: append(append([]archiver.Violation{}, b.Violations[:10]...), violation(n, now), violation(n, now))}
	res, err = s.Write(ctx, b2)
	if err != nil {
		t.Fatal(err)
	}
	if want := (archiver.Result{Violations: 1, Duplicates: 11}); res != want {
		t.Errorf("mixed batch: %+v, want %+v", res, want)
	}

	// Every column arrives as written.
	v := violation(n+1, now)
	v.Shadow, v.Reason, v.UserID, v.IP = true, event.ReasonOK, "", "2001:db8::1"
	if _, err := s.Write(ctx, archiver.Batch{Violations: []archiver.Violation{v}}); err != nil {
		t.Fatal(err)
	}
	var got archiver.Violation
	var userID *string
	var ip string
	err = s.pool.QueryRow(ctx, `SELECT event_id::text, occurred_at, user_id, host(ip_address), endpoint, http_method,
		user_tier, rule_id, algorithm, reason, limit_value, current_count, retry_after_ms, shadow, instance
		FROM rate_limit_violations WHERE event_id = $1`, v.EventID).Scan(&got.EventID, &got.OccurredAt, &userID, &ip,
		&got.Endpoint, &got.Method, &got.Tier, &got.RuleID, &got.Algorithm, &got.Reason, &got.Limit, &got.CurrentCount,
		&got.RetryAfterMs, &got.Shadow, &got.Instance)
	if err != nil {
		t.Fatal(err)
	}
	if userID != nil {
		t.Errorf("anonymous user_id stored as %q, want NULL", *userID)
	}
	got.IP, got.OccurredAt = ip, got.OccurredAt.UTC()
	want := v
	want.OccurredAt = v.OccurredAt.Truncate(time.Microsecond)
	if got != want {
		t.Errorf("stored\n%+v\nwant\n%+v", got, want)
	}
	var domain, descriptors *string
	if err := s.pool.QueryRow(ctx, `SELECT domain, descriptors::text FROM rate_limit_violations WHERE event_id = $1`,
		v.EventID).Scan(&domain, &descriptors); err != nil || domain != nil || descriptors != nil {
		t.Errorf("domain and descriptors of a /v1/check violation: %v %v %v, want NULL", domain, descriptors, err)
	}

	// A violation of Envoy's rate limit API keeps its domain and descriptors.
	rls := violation(n+2, now)
	rls.IP, rls.Endpoint, rls.Method = "0.0.0.0", "/", ""
	rls.Domain = "edge"
	rls.Descriptors = `[{"entries":[{"key":"api_key","value":"k-1"}],"rule_id":"rls.edge.api_key","code":"OVER_LIMIT"}]`
	if _, err := s.Write(ctx, archiver.Batch{Violations: []archiver.Violation{rls}}); err != nil {
		t.Fatal(err)
	}
	var code string
	if err := s.pool.QueryRow(ctx, `SELECT domain, descriptors->0->>'code' FROM rate_limit_violations WHERE event_id = $1`,
		rls.EventID).Scan(&domain, &code); err != nil || domain == nil || *domain != "edge" || code != "OVER_LIMIT" {
		t.Errorf("rate limit API violation: domain %v, descriptors[0].code %q, %v", domain, code, err)
	}
}

func TestWriteBansAndDeadLetters(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	now := time.Now().UTC()
	unban := ban("b-2", now)
	unban.Action, unban.ExpiresAt, unban.Evidence, unban.Note, unban.Reason = event.ActionUnban, time.Time{}, event.Evidence{}, "false positive", "manual"
	unban.Actor = "ana"
	b := archiver.Batch{
		Bans: []event.Ban{ban("b-1", now), unban},
		DeadLetters: []archiver.DeadLetter{
			{Topic: "ratelimit.decisions", Partition: 2, Offset: 41, Raw: []byte("{not json\x00\xff"), Error: "decode: bad \x00 byte \xff"},
			{Topic: "ratelimit.bans", Partition: 0, Offset: 7, Raw: nil, Error: "empty message"},
		},
	}
	res, err := s.Write(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if want := (archiver.Result{Bans: 2, DeadLetters: 2}); res != want {
		t.Errorf("first write: %+v, want %+v", res, want)
	}
	res, err = s.Write(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if want := (archiver.Result{Duplicates: 4}); res != want {
		t.Errorf("same batch again: %+v, want %+v", res, want)
	}
	if n := queryInt(t, s, "SELECT count(*) FROM bans"); n != 2 {
		t.Errorf("%d bans, want 2", n)
	}
	if n := queryInt(t, s, "SELECT count(*) FROM dead_letters"); n != 2 {
		t.Errorf("%d dead letters, want 2", n)
	}

	var raw []byte
	var errText string
	if err := s.pool.QueryRow(ctx, `SELECT raw, error FROM dead_letters WHERE "offset" = 41`).Scan(&raw, &errText); err != nil {
		t.Fatal(err)
	}
	if string(raw) != "{not json\x00\xff" {
		t.Errorf("raw = %q, want the bytes as received", raw)
	}
	if errText != "decode: bad \uFFFD byte \uFFFD" {
		t.Errorf("error = %q, want NUL and invalid UTF-8 replaced", errText)
	}

	var evidence []byte
	var expires *time.Time
	var note *string
	if err := s.pool.QueryRow(ctx, "SELECT evidence, expires_at, note FROM bans WHERE ban_id = 'b-1'").Scan(&evidence, &expires, &note); err != nil {
		t.Fatal(err)
	}
	var ev struct {
		FirstTS         time.Time `json:"first_ts"`
		SampleEndpoints []string  `json:"sample_endpoints"`
	}
	if err := json.Unmarshal(evidence, &ev); err != nil {
		t.Fatal(err)
	}
	if !ev.FirstTS.Equal(now.Add(-10*time.Second)) || strings.Join(ev.SampleEndpoints, ",") != "/a,/b" {
		t.Errorf("evidence = %s", evidence)
	}
	if expires == nil || !expires.Equal(now.Add(time.Hour).Truncate(time.Microsecond)) || note != nil {
		t.Errorf("expires_at = %v, note = %v; want now+1h and NULL", expires, note)
	}
	if err := s.pool.QueryRow(ctx, "SELECT expires_at, note FROM bans WHERE ban_id = 'b-2'").Scan(&expires, &note); err != nil {
		t.Fatal(err)
	}
	if expires != nil || note == nil || *note != "false positive" {
		t.Errorf("unban: expires_at = %v, note = %v; want NULL and the note", expires, note)
	}
	var actors []*string
	rows, err := s.pool.Query(ctx, "SELECT actor FROM bans ORDER BY ban_id")
	if err != nil {
		t.Fatal(err)
	}
	if actors, err = pgx.CollectRows(rows, pgx.RowTo[*string]); err != nil {
		t.Fatal(err)
	}
	if len(actors) != 2 || actors[0] != nil || actors[1] == nil || *actors[1] != "ana" {
		t.Errorf("actors %v, want NULL for the detector's ban and ana for the unban", actors)
	}
}

func TestWriteRejectsInvalidRowWholeBatch(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	now := time.Now().UTC()
	bad := violation(1, now)
	bad.Endpoint = "/a\x00b"
	_, err := s.Write(ctx, archiver.Batch{
		Violations:  []archiver.Violation{violation(0, now), bad, violation(2, now)},
		DeadLetters: []archiver.DeadLetter{{Topic: "t", Offset: 1, Raw: []byte("x"), Error: "e"}},
	})
	var rowErr *archiver.RowError
	if !errors.As(err, &rowErr) || rowErr.Table != "rate_limit_violations" || rowErr.Index != 1 {
		t.Fatalf("Write = %v, want a RowError for rate_limit_violations row 1", err)
	}
	if isTransient(err) {
		t.Errorf("isTransient(%v) = true", err)
	}
	if n := queryInt(t, s, "SELECT (SELECT count(*) FROM rate_limit_violations) + (SELECT count(*) FROM dead_letters)"); n != 0 {
		t.Errorf("%d rows stored, want none", n)
	}

	badBan := ban("", now)
	if _, err := s.Write(ctx, archiver.Batch{Bans: []event.Ban{ban("ok", now), badBan}}); !errors.As(err, &rowErr) || rowErr.Table != "bans" || rowErr.Index != 1 {
		t.Errorf("Write = %v, want a RowError for bans row 1", err)
	}
}

// TestLocate covers the last line of defence: a row validation would have
// caught reaches Postgres anyway; locate names it.
func TestLocate(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	now := time.Now().UTC()
	cols, err := violationArgs([]archiver.Violation{violation(0, now), violation(1, now), violation(2, now)})
	if err != nil {
		t.Fatal(err)
	}
	cols.endpoint[2] = "/nul\x00" // Postgres rejects NUL in text
	if _, err := s.pool.Exec(ctx, insertViolations, cols.slice(0, 3)...); err == nil {
		t.Fatal("Postgres accepted a NUL byte")
	}
	rowErr := s.locate(ctx, cols, &banColumns{}, &outcomeColumns{}, &deadLetterColumns{})
	if rowErr == nil || rowErr.Index != 2 || rowErr.Table != "rate_limit_violations" {
		t.Fatalf("locate = %v, want rate_limit_violations row 2", rowErr)
	}
	if n := queryInt(t, s, "SELECT count(*) FROM rate_limit_violations"); n != 0 {
		t.Errorf("locate left %d rows behind", n)
	}

	outs, err := outcomeArgs([]event.Outcome{outcome(0, now), outcome(1, now)})
	if err != nil {
		t.Fatal(err)
	}
	outs.tier[1] = "\x00"
	rowErr = s.locate(ctx, &violationColumns{}, &banColumns{}, outs, &deadLetterColumns{})
	if rowErr == nil || rowErr.Index != 1 || rowErr.Table != "outcomes" {
		t.Fatalf("locate = %v, want outcomes row 1", rowErr)
	}
	if n := queryInt(t, s, "SELECT count(*) FROM outcomes"); n != 0 {
		t.Errorf("locate left %d outcomes behind", n)
	}
}

func TestValidateViolation(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name   string
		change func(*archiver.Violation)
		want   string // "" for valid
	}{
		{"valid", func(*archiver.Violation) {}, ""},
		{"ipv6", func(v *archiver.Violation) { v.IP = "2001:db8::1" }, ""},
		{"upper case uuid", func(v *archiver.Violation) { v.EventID = "6BA7B810-9DAD-11D1-80B4-00C04FD430C8" }, ""},
		{"anonymous", func(v *archiver.Violation) { v.UserID = "" }, ""},
		{"event id not a uuid", func(v *archiver.Violation) { v.EventID = "evt-1" }, "event_id"},
		{"event id misplaced dash", func(v *archiver.Violation) { v.EventID = "6ba7b8109-dad-11d1-80b4-00c04fd430c8" }, "event_id"},
		{"event id non-hex", func(v *archiver.Violation) { v.EventID = "6ba7b810-9dad-11d1-80b4-00c04fd430cg" }, "event_id"},
		{"event id empty", func(v *archiver.Violation) { v.EventID = "" }, "event_id"},
		{"bad ip", func(v *archiver.Violation) { v.IP = "203.0.113.300" }, "ip"},
		{"ip with prefix", func(v *archiver.Violation) { v.IP = "10.0.0.0/8" }, "ip"},
		{"ip with zone", func(v *archiver.Violation) { v.IP = "fe80::1%eth0" }, "zone"},
		{"empty ip", func(v *archiver.Violation) { v.IP = "" }, "ip"},
		{"nul in endpoint", func(v *archiver.Violation) { v.Endpoint = "/a\x00" }, "NUL"},
		{"nul in instance", func(v *archiver.Violation) { v.Instance = "\x00" }, "instance"},
		{"invalid utf-8 in user", func(v *archiver.Violation) { v.UserID = "u-\xff" }, "UTF-8"},
		{"invalid utf-8 in reason", func(v *archiver.Violation) { v.Reason = "\xc3" }, "reason"},
		{"user id too long", func(v *archiver.Violation) { v.UserID = strings.Repeat("u", 4000) }, "user_id"},
		{"zero time", func(v *archiver.Violation) { v.OccurredAt = time.Time{} }, "ts"},
		{"time beyond timestamptz", func(v *archiver.Violation) { v.OccurredAt = time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC) }, "range"},
		{"time before timestamptz", func(v *archiver.Violation) { v.OccurredAt = time.Date(-5000, 1, 1, 0, 0, 0, 0, time.UTC) }, "range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := violation(1, now)
			tc.change(&v)
			err := validateViolation(v)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("validateViolation = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("validateViolation = %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}

func TestValidateBan(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name   string
		change func(*event.Ban)
		want   string
	}{
		{"valid", func(*event.Ban) {}, ""},
		{"unban without expiry or evidence", func(b *event.Ban) {
			b.Action, b.ExpiresAt, b.Evidence = event.ActionUnban, time.Time{}, event.Evidence{}
		}, ""},
		{"no ban id", func(b *event.Ban) { b.BanID = "" }, "ban_id"},
		{"nul in ban id", func(b *event.Ban) { b.BanID = "b\x00" }, "ban_id"},
		{"invalid utf-8 subject", func(b *event.Ban) { b.Subject = "\xff" }, "subject"},
		{"nul in note", func(b *event.Ban) { b.Note = "\x00" }, "note"},
		{"nul in evidence", func(b *event.Ban) { b.Evidence.SampleEndpoints = []string{"/ok", "/a\x00"} }, "sample_endpoints[1]"},
		{"nul in sample users", func(b *event.Ban) { b.Evidence.SampleUsers = []string{"u\x00"} }, "sample_users[0]"},
		{"zero ts", func(b *event.Ban) { b.TS = time.Time{} }, "ts"},
		{"expiry beyond timestamptz", func(b *event.Ban) { b.ExpiresAt = time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC) }, "expires_at"},
		{"subject too long", func(b *event.Ban) { b.Subject = strings.Repeat("s", 2000) }, "subject"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := ban("b-1", now)
			tc.change(&b)
			err := validateBan(b)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("validateBan = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("validateBan = %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}

// A ban from outcomes keeps the users and sources it was decided on.
func TestWriteBanEvidenceOfOutcomes(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	b := ban("b-o", time.Now().UTC())
	b.Reason, b.Evidence.SampleUsers, b.Evidence.SampleSources = "credential_stuffing", []string{"u-1", "u-2"}, []string{"198.51.100.9"}
	b.Evidence.SparedSources = []string{"203.0.113.10"}
	if _, err := s.Write(ctx, archiver.Batch{Bans: []event.Ban{b}}); err != nil {
		t.Fatal(err)
	}
	var users, sources, spared string
	if err := s.pool.QueryRow(ctx, `SELECT evidence->>'sample_users', evidence->>'sample_sources', evidence->>'spared_sources' FROM bans WHERE ban_id = 'b-o'`).Scan(&users, &sources, &spared); err != nil {
		t.Fatal(err)
	}
	if users != `["u-1", "u-2"]` || sources != `["198.51.100.9"]` || spared != `["203.0.113.10"]` {
		t.Fatalf("evidence sample_users %s, sample_sources %s, spared_sources %s", users, sources, spared)
	}
}
