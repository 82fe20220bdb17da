package console

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testkit"
)

// An operator logs in, finds the ban the detector issued with its
// evidence, opens the subject's timeline, lifts the ban with a reason, and
// the limiter admits the subject; the lift is in the audit trail with who
// and why, and on the subject's page.
func TestOperatorLiftsADetectorBan(t *testing.T) {
	s := startStack(t)
	const ip = "203.0.113.50"
	s.banByDetector(t, ip)

	b := newBrowser(t, s.console)
	if p := b.get("/bans"); p.status != http.StatusSeeOther || p.location != "/login" {
		t.Fatalf("bans without a session: %d to %q, want the login page", p.status, p.location)
	}
	overview := b.login("ana", "ana-password")
	if !strings.Contains(overview.body, `<span class="big">1</span> bans in force`) ||
		!strings.Contains(overview.body, `<span class="big">redis</span> decision mode`) {
		t.Fatalf("overview:\n%s", overview.body)
	}
	// Without CONSOLE_PROMETHEUS_URL the pages say how to show the figures
	// only Prometheus holds.
	if !strings.Contains(overview.body, "detector lag: set <code>CONSOLE_PROMETHEUS_URL</code> to show it") {
		t.Errorf("the overview does not say how to show the detector's lag:\n%s", overview.body)
	}
	if p := b.get("/rules"); !strings.Contains(p.body, "hits and denials: set <code>CONSOLE_PROMETHEUS_URL</code> to show them") {
		t.Errorf("the rules page does not say how to show the hits:\n%s", p.body)
	}
	bans := b.get("/bans?scope=ip&subject=" + ip)
	for _, want := range []string{ip, "violations_1h", "/api/item/", "of threshold 5"} {
		if !strings.Contains(bans.body, want) {
			t.Errorf("the bans page lacks %q:\n%s", want, bans.body)
		}
	}
	testkit.WaitFor(t, 30*time.Second, "the timeline with the archived violations and ban", func() bool {
		p := b.get("/subject?scope=ip&value=" + ip + "&range=1h")
		return strings.Contains(p.body, "Banned now") && strings.Contains(p.body, `class="m-ban"`) &&
			!strings.Contains(p.body, "violations: 0<")
	})

	overview = b.get("/")
	for _, want := range []string{`<svg class="bars"`, ">violations_1h</text>", ">api-per-ip</text>"} {
		if !strings.Contains(overview.body, want) {
			t.Errorf("the overview lacks %q once archived:\n%s", want, overview.body)
		}
	}
	subject := b.get("/subject?scope=ip&value=" + ip)
	lift := b.do(http.MethodPost, "/bans/lift", url.Values{"csrf": {subject.csrf(t)}, "scope": {"ip"}, "subject": {ip},
		"reason": {"false positive <b>"}})
	if lift.status != http.StatusSeeOther || !strings.Contains(lift.location, "done=lifted") {
		t.Fatalf("lift: %d to %q:\n%s", lift.status, lift.location, lift.body)
	}
	testkit.WaitFor(t, time.Second, "the limiter to stop enforcing the lifted ban", func() bool {
		_, reason := s.check(t, ip, "/api/item/0")
		return reason != "banned"
	})
	testkit.WaitFor(t, 10*time.Second, "the limiter to admit "+ip, func() bool {
		allowed, _ := s.check(t, ip, "/api/item/0")
		return allowed
	})
	if p := b.get(lift.location); !strings.Contains(p.body, "Ban lifted") || !strings.Contains(p.body, "Not banned now") {
		t.Errorf("the subject's page after the lift:\n%s", p.body)
	}
	testkit.WaitFor(t, 30*time.Second, "the lift in the audit trail", func() bool {
		p := b.get("/audit")
		return strings.Contains(p.body, "<td>ana</td><td>unban</td>") && strings.Contains(p.body, "false positive &lt;b&gt;")
	})
	testkit.WaitFor(t, 30*time.Second, "the lift on the subject's page", func() bool {
		p := b.get("/subject?scope=ip&value=" + ip)
		return strings.Contains(p.body, `class="m-unban"`) && strings.Contains(p.body, "<dd>ana</dd>")
	})
}

// A viewer sees the bans but may not lift one: the server refuses it, and
// the ban stays in force.
func TestViewerMayNotLift(t *testing.T) {
	s := startStack(t)
	const ip = "203.0.113.51"
	s.banByDetector(t, ip)
	b := newBrowser(t, s.console)
	b.login("vic", "vic-password")
	bans := b.get("/bans")
	if !strings.Contains(bans.body, ip) || strings.Contains(bans.body, `action="/bans/lift"`) {
		t.Fatalf("a viewer's bans page: want the ban without a lift form:\n%s", bans.body)
	}
	p := b.do(http.MethodPost, "/bans/lift", url.Values{"csrf": {bans.csrf(t)}, "scope": {"ip"}, "subject": {ip}, "reason": {"mine"}})
	if p.status != http.StatusForbidden || !strings.Contains(p.body, "Only operators") {
		t.Fatalf("a viewer's lift: %d:\n%s", p.status, p.body)
	}
	p = b.do(http.MethodPost, "/bans", url.Values{"csrf": {bans.csrf(t)}, "scope": {"ip"}, "subject": {"198.51.100.1"},
		"duration": {"1h"}, "reason": {"mine"}})
	if p.status != http.StatusForbidden {
		t.Fatalf("a viewer's ban: %d:\n%s", p.status, p.body)
	}
	if _, reason := s.check(t, ip, "/api/item/0"); reason != "banned" {
		t.Fatalf("after a viewer's refused lift the limiter says %q, want banned", reason)
	}
}

// A cross-site POST is refused whatever it carries, and so is a form
// without the session's CSRF token; the ban stays.
func TestCrossSiteAndForgedFormsRefused(t *testing.T) {
	s := startStack(t)
	b := newBrowser(t, s.console)
	b.login("ana", "ana-password")
	token := b.get("/bans").csrf(t)
	form := url.Values{"csrf": {token}, "scope": {"ip"}, "subject": {"198.51.100.9"}, "duration": {"1h"}, "reason": {"forged"}}
	tests := []struct {
		name    string
		form    url.Values
		headers []string
	}{
		{"cross-site fetch metadata", form, []string{"Sec-Fetch-Site", "cross-site"}},
		{"same-site but not same-origin", form, []string{"Sec-Fetch-Site", "same-site"}},
		{"foreign origin", form, []string{"Origin", "http://evil.example", "Sec-Fetch-Site", ""}},
		{"null origin", form, []string{"Origin", "null", "Sec-Fetch-Site", ""}},
		{"no CSRF token", url.Values{"scope": {"ip"}, "subject": {"198.51.100.9"}, "duration": {"1h"}, "reason": {"forged"}}, nil},
		{"another token", url.Values{"csrf": {"x" + token}, "scope": {"ip"}, "subject": {"198.51.100.9"}, "duration": {"1h"}, "reason": {"forged"}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if p := b.do(http.MethodPost, "/bans", tt.form, tt.headers...); p.status != http.StatusForbidden {
				t.Fatalf("%d to %q, want 403:\n%s", p.status, p.location, p.body)
			}
		})
	}
	if allowed, reason := s.check(t, "198.51.100.9", "/api/x"); !allowed {
		t.Fatalf("the forged ban was applied: %s", reason)
	}
	// The same form from the console's own page goes through.
	if p := b.do(http.MethodPost, "/bans", form); p.status != http.StatusSeeOther {
		t.Fatalf("the genuine form: %d:\n%s", p.status, p.body)
	}
	if _, reason := s.check(t, "198.51.100.9", "/api/x"); reason != "banned" {
		t.Fatalf("after the genuine ban the limiter says %q", reason)
	}
}

// A user id holding markup is shown as text on every page, and every page
// carries the strict Content-Security-Policy.
func TestMarkupInAUserIDStaysText(t *testing.T) {
	s := startStack(t)
	const evil = `<script>alert(1)</script><img src=x onerror=alert(2)>`
	b := newBrowser(t, s.console)
	b.login("ana", "ana-password")
	ban := b.do(http.MethodPost, "/bans", url.Values{"csrf": {b.get("/bans").csrf(t)}, "scope": {"user"}, "subject": {evil},
		"duration": {"1h"}, "reason": {"test <i>markup</i>"}})
	if ban.status != http.StatusSeeOther {
		t.Fatalf("ban: %d:\n%s", ban.status, ban.body)
	}
	pages := []string{"/bans", ban.location, "/subject?scope=user&value=" + url.QueryEscape(evil)}
	for _, path := range pages {
		p := b.get(path)
		if strings.Contains(p.body, "<script") || strings.Contains(p.body, "<img") || !strings.Contains(p.body, "&lt;script&gt;") {
			t.Errorf("%s renders the user id as markup:\n%s", path, p.body)
		}
		if csp := p.header.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "default-src 'none'") || strings.Contains(csp, "script-src") {
			t.Errorf("%s: Content-Security-Policy %q", path, csp)
		}
	}
	testkit.WaitFor(t, 30*time.Second, "the ban in the audit trail", func() bool {
		p := b.get("/audit")
		return strings.Contains(p.body, "&lt;script&gt;") && !strings.Contains(p.body, "<script")
	})
}

// A session cookie is Secure, HttpOnly and SameSite=Strict, and a logout
// ends the session; wrong passwords are refused, then the address is
// throttled even with the right password and another name.
func TestLoginSessionAndLogout(t *testing.T) {
	s := startStack(t)
	b := newBrowser(t, s.console)
	form := b.get("/login")
	p := b.do(http.MethodPost, "/login", url.Values{"csrf": {form.csrf(t)}, "user": {"ana"}, "password": {"ana-password"}})
	cookie := p.header.Get("Set-Cookie")
	for _, want := range []string{"rw_console=", "Path=/", "HttpOnly", "Secure", "SameSite=Strict"} {
		if !strings.Contains(strings.Join(p.header.Values("Set-Cookie"), "\n"), want) {
			t.Errorf("session cookie %q lacks %s", cookie, want)
		}
	}
	home := b.get("/")
	if home.status != http.StatusOK {
		t.Fatalf("overview after login: %d", home.status)
	}
	session := b.jar["rw_console"]
	if p := b.do(http.MethodPost, "/logout", url.Values{"csrf": {home.csrf(t)}}); p.status != http.StatusSeeOther {
		t.Fatalf("logout: %d", p.status)
	}
	b.jar["rw_console"] = session // the old cookie, replayed
	if p := b.get("/"); p.status != http.StatusSeeOther || p.location != "/login" {
		t.Fatalf("the ended session still opens the overview: %d", p.status)
	}

	for i := range 5 {
		form := b.get("/login")
		p := b.do(http.MethodPost, "/login", url.Values{"csrf": {form.csrf(t)}, "user": {"ana"}, "password": {"wrong"}})
		if p.status != http.StatusUnauthorized {
			t.Fatalf("wrong password %d: %d", i, p.status)
		}
	}
	form = b.get("/login")
	if p := b.do(http.MethodPost, "/login", url.Values{"csrf": {form.csrf(t)}, "user": {"ana"}, "password": {"ana-password"}}); p.status != http.StatusTooManyRequests {
		t.Fatalf("after 5 failures: %d, want 429", p.status)
	}
	other := newBrowser(t, s.console) // another name, from the same address
	form = other.get("/login")
	if p := other.do(http.MethodPost, "/login", url.Values{"csrf": {form.csrf(t)}, "user": {"vic"}, "password": {"vic-password"}}); p.status != http.StatusTooManyRequests {
		t.Fatalf("another user from the throttled address: %d, want 429", p.status)
	}
	// A login form posted without its cookie's token is refused.
	fresh := newBrowser(t, s.console)
	if p := fresh.do(http.MethodPost, "/login", url.Values{"csrf": {"guess"}, "user": {"ana"}, "password": {"ana-password"}}); p.status != http.StatusForbidden {
		t.Fatalf("a login without the form's token: %d, want 403", p.status)
	}
}

// An operator writes a dynamic rule on the rules page: a rule the admin API
// refuses comes back with the fields at fault and the text as written; a
// valid one is in force on the limiter and in the audit trail with who.
// A viewer sees the rules without their forms, and may not post one.
func TestDynamicRuleEditedInline(t *testing.T) {
	testkit.AvoidHourEnd(t) // the rule in force admits one request of the hour, then refuses
	s := startStack(t)
	b := newBrowser(t, s.console)
	b.login("ana", "ana-password")
	rules := b.get("/rules")
	if !strings.Contains(rules.body, "<code>api-per-ip</code>") || !strings.Contains(rules.body, `action="/rules"`) {
		t.Fatalf("the rules page:\n%s", rules.body)
	}
	bad := `{"id": "login-burst", "match": {"endpoints": ["/api/login"], "verbs": ["POST"]}, "key": ["ip"],
		"algorithm": "fixed_window", "limits": [{"requests": 0, "per": "1m"}]}`
	p := b.do(http.MethodPost, "/rules", url.Values{"csrf": {rules.csrf(t)}, "id": {"login-burst"}, "rule": {bad}})
	if p.status != http.StatusBadRequest {
		t.Fatalf("an invalid rule: %d:\n%s", p.status, p.body)
	}
	for _, want := range []string{"<code>match.verbs</code>: unknown field", "<code>limits[0].requests</code>", "&#34;verbs&#34;"} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the refused rule's page lacks %q:\n%s", want, p.body)
		}
	}
	good := `{"id": "login-burst", "match": {"endpoints": ["/api/login"]}, "key": ["ip"],
		"algorithm": "fixed_window", "limits": [{"requests": 1, "per": "1h"}]}`
	p = b.do(http.MethodPost, "/rules", url.Values{"csrf": {rules.csrf(t)}, "id": {"login-burst"}, "rule": {good}})
	if p.status != http.StatusSeeOther || p.location != "/rules?done=rule-saved" {
		t.Fatalf("a valid rule: %d to %q:\n%s", p.status, p.location, p.body)
	}
	testkit.WaitFor(t, 10*time.Second, "the limiter to apply the dynamic rule", func() bool {
		first, _ := s.check(t, "198.51.100.30", "/api/login")
		second, _ := s.check(t, "198.51.100.30", "/api/login")
		return first && !second
	})
	if p := b.get("/rules"); !strings.Contains(p.body, "<code>login-burst</code></td><td>dynamic") {
		t.Errorf("the rules page does not show the dynamic rule:\n%s", p.body)
	}
	testkit.WaitFor(t, 10*time.Second, "the change in the audit trail", func() bool {
		return strings.Contains(b.get("/audit").body, "<td>ana</td><td>rule put</td>")
	})

	viewer := newBrowser(t, s.console)
	page := viewer.login("vic", "vic-password")
	if p := viewer.get("/rules"); strings.Contains(p.body, `action="/rules"`) || !strings.Contains(p.body, "login-burst") {
		t.Errorf("a viewer's rules page:\n%s", p.body)
	}
	if p := viewer.do(http.MethodPost, "/rules/delete", url.Values{"csrf": {page.csrf(t)}, "id": {"login-burst"}}); p.status != http.StatusForbidden {
		t.Fatalf("a viewer's delete: %d", p.status)
	}
	if p := b.do(http.MethodPost, "/rules/delete", url.Values{"csrf": {rules.csrf(t)}, "id": {"login-burst"}}); p.status != http.StatusSeeOther {
		t.Fatalf("the operator's delete: %d:\n%s", p.status, p.body)
	}
}
