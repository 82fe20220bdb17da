package console

// What the login must withstand: a stranger failing logins in a real
// user's name, a timing probe for names, a flood of logins, a user logging
// in again and again.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/ratewarden/ratewarden/internal/clientaddr"
)

// loginFrom posts a login for name/password from the client address addr,
// with a valid login token, and returns the status.
func loginFrom(t *testing.T, s *Server, addr, name, password string) int {
	t.Helper()
	return loginWith(t, s, addr, name, password, func(*http.Request) {})
}

// loginWith is loginFrom with the request edited by edit first.
func loginWith(t *testing.T, s *Server, addr, name, password string, edit func(*http.Request)) int {
	t.Helper()
	w := httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/login", nil))
	cookie := w.Result().Cookies()[0]
	form := url.Values{"csrf": {cookie.Value}, "user": {name}, "password": {password}}
	r := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.RemoteAddr = addr + ":40000"
	r.AddCookie(cookie)
	edit(r)
	w = httptest.NewRecorder()
	s.ServeHTTP(w, r)
	return w.Code
}

func usersWith(t *testing.T, lines ...string) *Users {
	t.Helper()
	u, err := ParseUsers(strings.NewReader(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func hashLine(t *testing.T, name, role, password string, cost int) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(password), cost)
	if err != nil {
		t.Fatal(err)
	}
	return name + ":" + role + ":" + string(h)
}

// Anyone who can reach the login form and knows an operator's name
// (the audit trail and ban messages show it) fails 5 logins with that name
// from any address: the operator, from her own network and with the right
// password, must still log in. The name's throttle is keyed by name and
// client network.
func TestFailuresFromOneNetworkDoNotLockOutAnother(t *testing.T) {
	s := New(Config{Users: usersWith(t, hashLine(t, "ana", "operator", "her password", bcrypt.MinCost))})
	for i := range loginBurst {
		if code := loginFrom(t, s, "192.0.2.66", "ana", fmt.Sprint("guess", i)); code != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d", i, code)
		}
	}
	if code := loginFrom(t, s, "198.51.100.7", "ana", "her password"); code != http.StatusSeeOther {
		t.Errorf("the operator's own login from another address after an attacker's 5 failures: %d, want 303", code)
	}
}

// The decoy an unknown name is compared against is the last user's
// hash. docs/console.md offers `htpasswd -nbB` (bcrypt cost 5 by default)
// and `console user` (cost 10); with both in the file, a wrong password for
// a name that exists and one for a name that does not would take 2 ms and
// 50 ms: the names would be enumerable by timing. The decoy costs as much
// as the dearest hash in the file.
func TestDecoyCostsAsMuchAsEveryUser(t *testing.T) {
	u := usersWith(t, hashLine(t, "ana", "operator", "a", 5), hashLine(t, "bo", "viewer", "b", 10))
	dearest := 0
	for _, user := range u.byName {
		c, _ := bcrypt.Cost(user.hash)
		dearest = max(dearest, c)
	}
	decoy, _ := bcrypt.Cost(u.decoy)
	if decoy < dearest {
		t.Errorf("the decoy's bcrypt cost is %d, a user's is %d: an unknown name takes %dx longer than a known one",
			decoy, dearest, 1<<(dearest-decoy))
	}
	u = usersWith(t, hashLine(t, "bo", "viewer", "b", 10), hashLine(t, "ana", "operator", "a", 5))
	if decoy, _ := bcrypt.Cost(u.decoy); decoy < 10 {
		t.Errorf("users in the other order: the decoy's cost is %d, bo's is 10: a known name takes longer", decoy)
	}
}

// A cheap hash is reported at start, so the operator can rehash it.
func TestWeakUsersAreTheCheapHashes(t *testing.T) {
	u := usersWith(t, hashLine(t, "ana", "operator", "a", 5), hashLine(t, "bo", "viewer", "b", RecommendedCost))
	if weak := u.WeakUsers(); len(weak) != 1 || weak[0] != "ana" {
		t.Fatalf("weak users %v, want [ana]", weak)
	}
}

// Behind a trusted proxy the client is the forwarded address: failures
// forwarded for one network do not lock out a client of another, though
// both reach the console from the proxy's address. From an untrusted peer
// the header is ignored.
func TestLoginThrottleSeesClientsBehindTrustedProxies(t *testing.T) {
	s := New(Config{Users: usersWith(t, hashLine(t, "ana", "operator", "her password", bcrypt.MinCost)),
		Clients: clientaddr.Resolver{Trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}})
	post := func(peer, forwarded, password string) int {
		return loginWith(t, s, peer, "ana", password, func(r *http.Request) { r.Header.Set("X-Forwarded-For", forwarded) })
	}
	for i := range loginBurst {
		if code := post("10.0.0.2", "192.0.2.66", fmt.Sprint("guess", i)); code != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d", i, code)
		}
	}
	if code := post("10.0.0.2", "192.0.2.67", "her password"); code != http.StatusTooManyRequests {
		t.Errorf("the attacker's network (forwarded): %d, want 429", code)
	}
	if code := post("10.0.0.2", "198.51.100.7", "her password"); code != http.StatusSeeOther {
		t.Errorf("another network behind the same proxy: %d, want 303", code)
	}
	if code := post("203.0.113.9", "198.51.100.7", "wrong"); code != http.StatusUnauthorized {
		t.Fatalf("untrusted peer: %d", code)
	}
}

// IPv6 clients are throttled by /64 (one host holds one), IPv4 by /24.
func TestClientNetwork(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.66": "192.0.2.0/24", "2001:db8:1:2:aaaa::1": "2001:db8:1:2::/64", "2001:db8:1:2:bbbb::9": "2001:db8:1:2::/64",
	} {
		if got := clientNetwork(netip.MustParseAddr(in)); got != want {
			t.Errorf("%s: %s, want %s", in, got, want)
		}
	}
	if got := clientNetwork(netip.Addr{}); got != "unknown" {
		t.Errorf("no address: %s", got)
	}
}

// A user who logs in again and again ends only her own oldest sessions,
// never another user's, and is throttled past a burst of logins.
func TestLoginsEndOnlyTheUsersOwnSessions(t *testing.T) {
	c := newClock()
	s := New(Config{Users: usersWith(t, hashLine(t, "ana", "operator", "a", bcrypt.MinCost),
		hashLine(t, "vic", "viewer", "v", bcrypt.MinCost)), MaxSessions: 1000, Now: c.now})
	if code := loginFrom(t, s, "192.0.2.1", "ana", "a"); code != http.StatusSeeOther {
		t.Fatalf("ana: %d", code)
	}
	refused := 0
	for range 3 * startBurst {
		c.advance(10 * time.Second)
		switch code := loginFrom(t, s, "198.51.100.7", "vic", "v"); code {
		case http.StatusSeeOther:
		case http.StatusTooManyRequests:
			refused++
		default:
			t.Fatalf("vic: %d", code)
		}
	}
	if refused == 0 {
		t.Error("30 logins in 5 minutes were never throttled")
	}
	s.sessions.mu.Lock()
	defer s.sessions.mu.Unlock()
	if n := s.sessions.ofUser["vic"]; n != maxSessionsPerUser {
		t.Errorf("vic holds %d sessions, want %d", n, maxSessionsPerUser)
	}
	if n := s.sessions.ofUser["ana"]; n != 1 {
		t.Errorf("ana's session was ended by vic's logins: she holds %d", n)
	}
}

// Past its slots and its queue the gate refuses at once; a slot left is
// taken again.
func TestGateRefusesPastItsQueue(t *testing.T) {
	g := newGate(1, 0, time.Hour)
	if !g.enter(context.Background()) {
		t.Fatal("a free slot refused")
	}
	if g.enter(context.Background()) {
		t.Fatal("entered past the slots with no queue")
	}
	g.leave()
	if !g.enter(context.Background()) {
		t.Fatal("a slot left was not taken again")
	}
}

// A user has at most maxReadsPerUser archive reads in flight; another
// user's are counted apart.
func TestReadsInFlightPerUser(t *testing.T) {
	f := newInFlight(2)
	for i := range 2 {
		if !f.start("vic") {
			t.Fatalf("vic's read %d refused", i+1)
		}
	}
	if f.start("vic") {
		t.Fatal("vic's third read admitted")
	}
	if !f.start("ana") {
		t.Fatal("ana refused for vic's reads")
	}
	f.done("vic")
	if !f.start("vic") {
		t.Fatal("a read ended, vic still refused")
	}
}
