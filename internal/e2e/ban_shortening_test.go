package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/testkit"
)

// A manual ban never shortens a detector ban in force: POST answers 200
// with the detector's ban, unchanged, and the client stays banned past the
// manual ban's end. Shortening is explicit (DELETE, then POST): the
// detector's record goes with the ban, so once the short ban has lapsed
// the client's next scan is judged afresh and banned again, not merely
// warned about.
func TestManualBanNeverShortensADetectorBan(t *testing.T) {
	t.Parallel() // it mostly waits; see the Makefile's unit target
	e := newEnv(t)
	detector := e.start("detector")
	limiter := e.start("limiter", "TRUSTED_PROXIES", "127.0.0.1")
	const scanner, normal = "203.0.113.88", "198.51.100.11"
	check(t, limiter, normal, "/api/books/1")
	waitConsuming(t, detector, 1)
	scanUntilBanned(t, limiter, detector, scanner, normal)
	detectorBan := bans(t, e, 1)[0]
	if detectorBan.Source != "detector" || detectorBan.DurationS != 3600 {
		t.Fatalf("ban message %+v, want the detector's ban of an hour", detectorBan)
	}

	shortBan := fmt.Sprintf(`{"scope":"ip","subject":%q,"duration":"2s","reason":"test"}`, scanner)
	status, body := admin(t, limiter, http.MethodPost, "/v1/admin/bans", adminToken, shortBan)
	if status != http.StatusOK {
		t.Fatalf("a 2 s ban over the detector's hour: %d %s, want 200 with the ban in force", status, body)
	}
	kept, err := event.DecodeBan([]byte(body))
	if err != nil || kept.BanID != detectorBan.BanID || !kept.ExpiresAt.Equal(detectorBan.ExpiresAt.Truncate(time.Millisecond)) {
		t.Fatalf("answer %s (%v), want the detector's ban %s until %v", body, err, detectorBan.BanID, detectorBan.ExpiresAt)
	}
	time.Sleep(2500 * time.Millisecond)
	if d := check(t, limiter, scanner, "/api/x"); d.Reason != event.ReasonBanned {
		t.Fatalf("after the short ban's end: %+v, want still banned", d)
	}

	// Explicit shortening: lift, then ban for 2 s.
	if status, body := admin(t, limiter, http.MethodDelete, "/v1/admin/bans/ip/"+scanner, adminToken, ""); status != http.StatusOK {
		t.Fatalf("unban: %d %s", status, body)
	}
	if status, body := admin(t, limiter, http.MethodPost, "/v1/admin/bans", adminToken, shortBan); status != http.StatusCreated {
		t.Fatalf("a 2 s ban after the unban: %d %s, want 201", status, body)
	}
	testkit.WaitFor(t, 10*time.Second, "the short ban to lapse", func() bool {
		return check(t, limiter, scanner, "/api/x").Reason != event.ReasonBanned
	})
	// The detector judges the next scan afresh: a ban, not a warning.
	scanUntilBanned(t, limiter, detector, scanner, normal)
	for _, b := range bans(t, e, 4)[1:] {
		if b.Source == "detector" && b.Action == event.ActionBan && b.BanID != detectorBan.BanID {
			return
		}
	}
	t.Fatal("no new detector ban on the ban topic after the short manual ban lapsed")
}
