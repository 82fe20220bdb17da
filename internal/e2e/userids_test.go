package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
)

// Failures priced per account, and account attacks from more than 10
// sources.
const userIDRules = `
rules:
  - id: failures-per-user
    match: {endpoints: ["/api/login"], methods: [POST]}
    key: [user_id]
    algorithm: sliding_window
    limits: [{requests: 5, per: 15m}]
    spent_by: report
    statuses: [401, 403]
detection:
  account_attack: {distinct_sources: 10, within: 10m, duration: 1h}
  credential_stuffing: {enabled: false}
`

// spellings returns n spellings of one user id: its letters upper-cased by
// the bits of i, then full-width forms.
func spellings(id string, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		b := []rune(id)
		for j := range b {
			switch {
			case i >= 1<<len(b):
				b[j] += 'ａ' - 'a' // full-width
			case i&(1<<j) != 0:
				b[j] -= 'a' - 'A'
			}
		}
		if s := string(b); !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// User ids are one account however they are spelled (case, Unicode
// compatibility forms): 11 addresses failing on 11 spellings of dave are an
// account attack on dave (more than 10 sources); a failure budget of 5 per
// user refuses erin's login after 5 failures under 5 spellings; and a ban
// of Frank refuses frank and FRANK, until FRANK is unbanned. Events keep
// the ids as sent.
func TestUserIDSpellingsAreOneAccount(t *testing.T) {
	t.Parallel() // mostly waits on the detector
	e := newEnvWith(t, userIDRules)
	limiter := e.start("limiter")
	e.start("detector")

	daves := spellings("dave", 11)
	for i, u := range daves {
		postReport(t, limiter, fmt.Sprintf(`{"ip":"198.51.100.%d","endpoint":"/api/login","method":"POST","user_id":%q,"status":401}`, i+1, u))
	}
	for i, u := range spellings("erin", 5) {
		if d := checkLogin(t, limiter, "203.0.113.9", u); !d.Allowed {
			t.Fatalf("login %d of erin (%s) refused: %+v", i+1, u, d)
		}
		postReport(t, limiter, `{"ip":"203.0.113.9","endpoint":"/api/login","method":"POST","user_id":"`+u+`","status":401}`)
	}
	if d := checkLogin(t, limiter, "203.0.113.9", "ERIN"); d.Allowed || d.Reason != event.ReasonRateLimited {
		t.Errorf("erin's login after 5 failures under 5 spellings: %+v, want refused", d)
	}
	if code, body := admin(t, limiter, http.MethodPost, "/v1/admin/bans", adminToken,
		`{"scope":"user","subject":"Frank","duration":"1h","reason":"test"}`); code != http.StatusCreated {
		t.Fatalf("ban of Frank: %d %s", code, body)
	}
	for _, u := range []string{"Frank", "frank", "FRANK", "ｆｒａｎｋ"} {
		if d := checkLogin(t, limiter, "203.0.113.10", u); d.Reason != event.ReasonBanned {
			t.Errorf("%s after a ban of Frank: %+v, want banned", u, d)
		}
	}
	if code, body := admin(t, limiter, http.MethodDelete, "/v1/admin/bans/user/FRANK", adminToken, ""); code != http.StatusOK {
		t.Fatalf("unban of FRANK: %d %s", code, body)
	}
	if d := checkLogin(t, limiter, "203.0.113.10", "Frank"); !d.Allowed {
		t.Errorf("Frank after an unban of FRANK: %+v, want allowed", d)
	}

	// Frank's ban and unban, the attack on dave: its 11 sources and a
	// warning.
	var sources []string
	for _, b := range bans(t, e, 14) {
		switch {
		case b.Reason == "manual" && b.Subject == "frank":
		case b.Reason == abuse.ReasonAccountAttack && b.Action == event.ActionBan && b.Scope == event.ScopeIP:
			sources = append(sources, b.Subject)
		case b.Reason == abuse.ReasonAccountAttack && b.Action == event.ActionWarn && b.Subject == "dave":
		default:
			t.Errorf("unexpected ban %+v", b)
		}
	}
	if len(sources) != 11 {
		t.Errorf("%d sources banned for the attack on dave, want 11: %v", len(sources), sources)
	}
	got := map[string]bool{}
	for _, o := range outcomes(t, e, len(daves)+5) {
		got[o.UserID] = true
	}
	for _, u := range daves {
		if !got[u] {
			t.Errorf("no outcome event with user_id %q as sent (events: %v)", u, got)
		}
	}
	time.Sleep(time.Second) // nothing more
	if n := kafkatest.CountMessages(t, e.broker.Brokers(), bansTopic); n != 14 {
		t.Errorf("%d ban messages, want 14", n)
	}
}

// invisibleSpellings are spellings of id an application that trims its
// input, or matches ids as Unicode's NFKC_Casefold does, takes for id: white
// space at either end, and characters that render as nothing (zero-width
// space and joiners, a soft hyphen, a byte order mark, a variation
// selector).
func invisibleSpellings(id string) []string {
	mid := len(id) / 2
	return []string{" " + id, id + " ", "\u00a0" + id, id + "\u3000", id + "\u200b", id[:mid] + "\u00ad" + id[mid:],
		"\ufeff" + id, id[:mid] + "\u200d" + id[mid:], id + "\ufe0f", id[:mid] + "\u2060" + id[mid:], "\u200e" + id}
}

// Spellings that differ by white space at their ends or by characters that
// render as nothing are one account too: 11 addresses failing on 11 such
// spellings of ivan are an account attack on ivan, and 5 failures under 5
// of them spend judy's failure budget of 5.
func TestUserIDInvisibleSpellingsAreOneAccount(t *testing.T) {
	t.Parallel() // mostly waits on the detector
	e := newEnvWith(t, userIDRules)
	limiter := e.start("limiter")
	e.start("detector")

	ivans := invisibleSpellings("ivan")
	for i, u := range ivans {
		postReport(t, limiter, fmt.Sprintf(`{"ip":"198.51.100.%d","endpoint":"/api/login","method":"POST","user_id":%q,"status":401}`, i+1, u))
	}
	for i, u := range invisibleSpellings("judy")[:5] {
		if d := checkLogin(t, limiter, "203.0.113.9", "judy"); !d.Allowed {
			t.Fatalf("judy's login %d refused: %+v", i+1, d)
		}
		postReport(t, limiter, fmt.Sprintf(`{"ip":"203.0.113.9","endpoint":"/api/login","method":"POST","user_id":%q,"status":401}`, u))
	}
	if d := checkLogin(t, limiter, "203.0.113.9", "judy"); d.Allowed || d.Reason != event.ReasonRateLimited {
		t.Errorf("judy's login after 5 failures under 5 spellings: %+v, want refused", d)
	}

	var sources []string
	warned := false
	for _, b := range bans(t, e, len(ivans)+1) {
		switch {
		case b.Reason == abuse.ReasonAccountAttack && b.Action == event.ActionBan && b.Scope == event.ScopeIP:
			sources = append(sources, b.Subject)
		case b.Reason == abuse.ReasonAccountAttack && b.Action == event.ActionWarn && b.Subject == "ivan":
			warned = true
		default:
			t.Errorf("unexpected ban %+v", b)
		}
	}
	if len(sources) != len(ivans) || !warned {
		t.Errorf("%d sources banned for the attack on ivan (want %d), warned %v", len(sources), len(ivans), warned)
	}
}
