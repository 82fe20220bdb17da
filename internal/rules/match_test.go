package rules

import (
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
)

const matchYAML = `
rules:
  - id: z-last
    priority: 200
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 1000, per: 1m}]
  - id: login
    priority: 10
    match: {endpoints: ["/api/login", "/api/auth/**"], methods: [post]}
    key: [ip]
    algorithm: sliding_window
    limits: [{requests: 5, per: 1s}, {requests: 100, per: 1m}]
    penalty: 5m
    shadow: true
    on_redis_failure: deny
  - id: b-user
    match: {endpoints: ["/api/books/**"]}
    key: [user_id]
    algorithm: token_bucket
    limits: [{rate: 1, per: 1s, burst: 10}]
    tiers:
      VIP: [{rate: 5, per: 1s, burst: 50}]
  - id: a-app
    match: {endpoints: ["/api/books/**"]}
    key: [attr:app_key, ip]
    algorithm: fixed_window
    limits: [{requests: 10, per: 1s}]
  - id: gold-only
    match: {tiers: [gold]}
    key: [tier, user_id]
    algorithm: fixed_window
    limits: [{requests: 10, per: 1s}]
exempt:
  tiers: [super_admin]
  ips: ["10.0.0.0/8", "2001:db8::1", "192.0.2.7"]
  endpoints: ["/healthz", "/static/**"]
  users: [ops-bot]
`

func TestMatchPriorityAndSkips(t *testing.T) {
	s := mustCompile(t, matchYAML)
	now := time.Now()
	tests := []struct {
		name string
		mod  func(r *Request)
		want []string
	}{
		{"anonymous book read: user and app rules skipped", func(r *Request) { r.Endpoint = "/api/books/1" }, []string{"z-last"}},
		{"user book read", func(r *Request) { r.Endpoint, r.UserID = "/api/books/1", "u1" }, []string{"b-user", "z-last"}},
		{"user and app: same priority ordered by id", func(r *Request) {
			r.Endpoint, r.UserID, r.Attributes = "/api/books/1", "u1", map[string]string{"app_key": "k"}
		}, []string{"a-app", "b-user", "z-last"}},
		{"empty attribute value skips", func(r *Request) {
			r.Endpoint, r.Attributes = "/api/books/1", map[string]string{"app_key": ""}
		}, []string{"z-last"}},
		{"login POST first", func(r *Request) { r.Endpoint, r.Method = "/api/login", "POST" }, []string{"login", "z-last"}},
		{"login method case-insensitive", func(r *Request) { r.Endpoint, r.Method = "/api/auth/x/y", "post" }, []string{"login", "z-last"}},
		{"login GET not matched", func(r *Request) { r.Endpoint = "/api/login" }, []string{"z-last"}},
		{"tier match case-insensitive", func(r *Request) { r.Tier, r.UserID = "Gold", "u1" }, []string{"gold-only", "z-last"}},
		{"tier match without user skipped", func(r *Request) { r.Tier = "GOLD" }, []string{"z-last"}},
		{"no ip: nothing", func(r *Request) { r.IP = "" }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := request("203.0.113.9", "/")
			tt.mod(r)
			if got := ids(s.Match(r, now, nil)); !slices.Equal(got, tt.want) {
				t.Errorf("Match = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestMatchBuildsCall(t *testing.T) {
	s := mustCompile(t, matchYAML)
	r := request("203.0.113.9", "/api/login")
	r.Method, r.Cost = "POST", 3
	as := s.Match(r, time.Now(), make([]Applied, 0, 4))
	a := as[0]
	if a.Rule.ID != "login" || a.Rule.Priority != 10 || !a.Rule.Shadow || a.Rule.OnRedisFailure != FailDeny || a.Rule.Algorithm != decide.SlidingWindow {
		t.Errorf("rule = %+v", a.Rule)
	}
	want := decide.Call{
		Keys: decide.Keys{
			State: "rw:{login|ip=203.0.113.9}:sw2",
			Hold:  "rw:{login|ip=203.0.113.9}:hold",
			Hits:  "rw:{login|ip=203.0.113.9}:hits",
		},
		Algorithm: decide.SlidingWindow,
		Limits:    []decide.Limit{{Requests: 5, Per: time.Second}, {Requests: 100, Per: time.Minute}},
		Cost:      3,
		Penalty:   5 * time.Minute,
	}
	if !reflect.DeepEqual(a.Call, want) {
		t.Errorf("call = %+v\nwant   %+v", a.Call, want)
	}
}

func TestTierOverrides(t *testing.T) {
	s := mustCompile(t, matchYAML)
	base := []decide.Limit{{Rate: 1, Burst: 10, Per: time.Second}}
	vip := []decide.Limit{{Rate: 5, Burst: 50, Per: time.Second}}
	for _, tt := range []struct {
		tier string
		want []decide.Limit
	}{{"", base}, {"BASIC", base}, {"VIP", vip}, {"vip", vip}, {"Vip", vip}} {
		t.Run("tier "+tt.tier, func(t *testing.T) {
			r := request("203.0.113.9", "/api/books/1")
			r.UserID, r.Tier = "u", tt.tier
			as := s.Match(r, time.Now(), nil)
			if as[0].Rule.ID != "b-user" || !reflect.DeepEqual(as[0].Call.Limits, tt.want) {
				t.Errorf("limits = %+v, want %+v", as[0].Call.Limits, tt.want)
			}
		})
	}
}

// Exempt is ExemptRequest (address, endpoint) or ExemptUser (tier, user
// id): an exempt account does not make its client exempt.
func TestExempt(t *testing.T) {
	s := mustCompile(t, matchYAML)
	tests := []struct {
		name         string
		r            *Request
		want, byUser bool
	}{
		{"plain", request("203.0.113.9", "/api/login"), false, false},
		{"ip in cidr", request("10.1.2.3", "/api/login"), true, false},
		{"single ipv4", request("192.0.2.7", "/x"), true, false},
		{"neighbour of single ipv4", request("192.0.2.8", "/x"), false, false},
		{"single ipv6", request("2001:db8::1", "/x"), true, false},
		{"ipv4-mapped ipv6", request("::ffff:10.9.9.9", "/x"), true, false},
		{"ip from string only", &Request{IP: "10.0.0.1", Endpoint: "/x"}, true, false},
		{"zoned ipv6", &Request{Addr: netip.MustParseAddr("2001:db8::1%eth0"), Endpoint: "/x"}, true, false},
		{"no ip", &Request{Endpoint: "/x"}, false, false},
		{"endpoint", request("203.0.113.9", "/healthz"), true, false},
		{"endpoint pattern", request("203.0.113.9", "/static/css/a.css"), true, false},
		{"endpoint prefix only", request("203.0.113.9", "/healthzz"), false, false},
		{"tier case-insensitive", &Request{IP: "203.0.113.9", Tier: "Super_Admin"}, true, true},
		{"user", &Request{IP: "203.0.113.9", UserID: "ops-bot"}, true, true},
		{"user, another spelling", &Request{IP: "203.0.113.9", UserID: "OPS-BOT"}, true, true},
		{"another user", &Request{IP: "203.0.113.9", UserID: "ops-bot2"}, false, false},
		{"user from an exempt address", &Request{IP: "10.1.2.3", UserID: "ops-bot"}, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := s.Exempt(tt.r); got != tt.want {
				t.Errorf("Exempt = %v, want %v", got, tt.want)
			}
			if got := s.ExemptUser(tt.r); got != tt.byUser {
				t.Errorf("ExemptUser = %v, want %v", got, tt.byUser)
			}
			if got := s.ExemptRequest(tt.r); got != (tt.want && (!tt.byUser || tt.r.IP == "10.1.2.3")) {
				t.Errorf("ExemptRequest = %v", got)
			}
		})
	}
	exact, err := Compile(mustParse(t, matchYAML), Options{CaseSensitiveUserIDs: true})
	if err != nil {
		t.Fatal(err)
	}
	if exact.ExemptUser(&Request{UserID: "OPS-BOT"}) || !exact.ExemptUser(&Request{UserID: "ops-bot"}) {
		t.Error("with case-sensitive user ids, only the exempt spelling is exempt")
	}
}

func TestSetAccessors(t *testing.T) {
	s := mustCompile(t, strings.Replace(matchYAML, "exempt:", `
  - id: sched
    match: {tiers: [silver]}
    key: [ip, attr:b, attr:a]
    algorithm: fixed_window
    limits: [{requests: 1, per: 1s}]
    schedule: [{daily: {from: "01:00", to: "02:00"}, limits: [{requests: 1, per: 1s}], tiers: {bronze: [{requests: 1, per: 1s}]}}]
exempt:`, 1))
	var got []string
	for _, r := range s.Rules() {
		got = append(got, r.ID)
	}
	if want := []string{"login", "a-app", "b-user", "gold-only", "sched", "z-last"}; !slices.Equal(got, want) {
		t.Errorf("Rules() = %v, want %v", got, want)
	}
	if want := []string{"BRONZE", "GOLD", "SILVER", "SUPER_ADMIN", "VIP"}; !slices.Equal(s.Tiers(), want) {
		t.Errorf("Tiers() = %v, want %v", s.Tiers(), want)
	}
	if want := []string{"a", "app_key", "b"}; !slices.Equal(s.AttrNames(), want) {
		t.Errorf("AttrNames() = %v, want %v", s.AttrNames(), want)
	}
	if !reflect.DeepEqual(s.Detection(), DefaultDetection()) {
		t.Errorf("Detection() = %+v", s.Detection())
	}
	if s.Rule("nope") != nil || s.Rule("login") != s.Rules()[0] {
		t.Error("Rule(id) lookup")
	}
}

func TestCompileOwnsItsRules(t *testing.T) {
	f := mustParse(t, matchYAML)
	s, err := Compile(f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	f.Rules[0].ID = "changed"
	if s.Rule("z-last") == nil {
		t.Error("the Set shares rules with the File")
	}
	if _, ok := f.Rules[1].Keys(request("192.0.2.1", "/")); ok {
		t.Error("a parsed rule has keys before Compile")
	}
}

func TestCompileRejectsInvalidFile(t *testing.T) {
	f := mustParse(t, matchYAML)
	f.Rules = append(f.Rules, f.Rules[0])
	if _, err := Compile(f, Options{}); err == nil {
		t.Fatal("duplicate id compiled")
	}
}

func TestMatchAllocatesOncePerAppliedRule(t *testing.T) {
	s := mustCompile(t, matchYAML)
	r := request("203.0.113.9", "/api/books/1")
	r.UserID, r.Tier = "u1", "VIP"
	r.Attributes = map[string]string{"app_key": "k"}
	out := make([]Applied, 0, 8)
	now := time.Now()
	n := len(s.Match(r, now, out))
	if allocs := testing.AllocsPerRun(100, func() { out = s.Match(r, now, out[:0]) }); allocs != float64(n) {
		t.Errorf("Match allocates %v times for %d rules", allocs, n)
	}
}
