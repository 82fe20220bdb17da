package loginsim

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"
)

// banningLimiter is a limiter's decision API that refuses an address as
// banned from its bannedFrom-th check on (1: the first), except the checks
// numbered in lapses, which it lets through; it counts the reports.
type banningLimiter struct {
	*httptest.Server
	bannedFrom map[string]int
	lapses     map[string]map[int]bool

	mu      sync.Mutex
	checks  map[string]int
	users   map[string][]string // ip -> the user of each check
	reports map[string]int      // ip -> reports with status 401
}

func newBanningLimiter(t *testing.T, bannedFrom map[string]int, lapses map[string]map[int]bool) *banningLimiter {
	t.Helper()
	l := &banningLimiter{bannedFrom: bannedFrom, lapses: lapses, checks: map[string]int{}, users: map[string][]string{}, reports: map[string]int{}}
	l.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			IP     string `json:"ip"`
			UserID string `json:"user_id"`
			Status int    `json:"status"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		l.mu.Lock()
		defer l.mu.Unlock()
		switch r.URL.Path {
		case "/v1/check":
			l.checks[req.IP]++
			l.users[req.IP] = append(l.users[req.IP], req.UserID)
			n := l.checks[req.IP]
			if from, ok := l.bannedFrom[req.IP]; ok && n >= from && !l.lapses[req.IP][n] {
				w.Write([]byte(`{"allowed":false,"reason":"banned","retry_after_ms":1000}`))
				return
			}
			w.Write([]byte(`{"allowed":true,"reason":"ok"}`))
		case "/v1/report":
			if req.Status == 401 {
				l.reports[req.IP]++
			}
			w.Write([]byte(`{"rules":[]}`))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(l.Close)
	return l
}

// The counts after the ban come from the limiter's answers: an address
// refused as banned from its first attempt, one let through twice before
// its ban arrives, and one whose ban lapses once after it (a limiter that
// lost it) are counted as they were answered.
func TestTryAgainCountsTheAnswersAfterTheBan(t *testing.T) {
	const bannedAtOnce, bannedLate, lapsing = "198.18.0.1", "198.18.0.2", "198.19.0.1"
	l := newBanningLimiter(t, map[string]int{bannedAtOnce: 1, bannedLate: 3, lapsing: 2},
		map[string]map[int]bool{lapsing: {3: true}})
	attackers := []Attempt{
		{Actor: ActorStuffing, IP: bannedAtOnce, UserID: "user-2", Status: 401},
		{Actor: ActorStuffing, IP: bannedLate, UserID: "user-5", Status: 401},
		{Actor: ActorAttack, IP: lapsing, UserID: "victim", Status: 401},
	}
	got, err := TryAgain(context.Background(), Target{URL: l.URL}, attackers,
		Retry{Every: time.Millisecond, Wait: time.Hour, Again: 2, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]AfterBan{
		ActorStuffing: {Addresses: 2, Banned: 2, Before: 2, Attempts: 4, Refused: 4},
		ActorAttack:   {Addresses: 1, Banned: 1, Before: 1, Attempts: 2, Refused: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("actors %v, want %v", got, want)
	}
	for actor, w := range want {
		if got[actor] == nil || *got[actor] != w {
			t.Errorf("%s: %+v, want %+v", actor, got[actor], w)
		}
	}
	// Every attempt let through was reported as a failed login.
	wantReports := map[string]int{bannedLate: 2, lapsing: 2}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.reports) != len(wantReports) || l.reports[bannedLate] != 2 || l.reports[lapsing] != 2 {
		t.Errorf("reports %v, want %v", l.reports, wantReports)
	}
	// A stuffing bot tries an account it has not tried at each attempt; an
	// attack source, its victim.
	tried := map[string]bool{"user-5": true}
	for _, u := range l.users[bannedLate] {
		if tried[u] {
			t.Errorf("bot %s tried %s twice: %q", bannedLate, u, l.users[bannedLate])
		}
		tried[u] = true
	}
	if want := []string{"victim", "victim", "victim", "victim"}; !slices.Equal(l.users[lapsing], want) {
		t.Errorf("attack source tried %q, want %q", l.users[lapsing], want)
	}
}

// An address never refused as banned tries once at least and then stops
// at the end of the wait, counted as not banned.
func TestTryAgainStopsAnAddressNeverBanned(t *testing.T) {
	l := newBanningLimiter(t, nil, nil)
	got, err := TryAgain(context.Background(), Target{URL: l.URL},
		[]Attempt{{Actor: ActorStuffing, IP: "198.18.0.1", UserID: "user-2", Status: 401}},
		Retry{Every: time.Millisecond, Wait: 0, Again: 2, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	if n := got[ActorStuffing]; n == nil || *n != (AfterBan{Addresses: 1, Before: 1}) {
		t.Fatalf("%+v, want one address not banned after one attempt", n)
	}
}

func TestAttackers(t *testing.T) {
	cfg := DefaultConfig()
	attempts := Scenario(cfg)
	last := map[string]Attempt{}
	for _, a := range attempts {
		last[a.IP] = a
	}
	got := Attackers(attempts)
	if len(got) != cfg.Bots+cfg.AttackSources {
		t.Fatalf("%d attackers, want %d", len(got), cfg.Bots+cfg.AttackSources)
	}
	seen := map[string]bool{}
	for _, a := range got {
		if a.Actor == ActorNormal || seen[a.IP] || a != last[a.IP] {
			t.Fatalf("attacker %+v: a normal user, a second time, or not its last attempt (%+v)", a, last[a.IP])
		}
		seen[a.IP] = true
	}
}
