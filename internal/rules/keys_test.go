package rules

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

const keysYAML = `
rules:
  - {id: by-ip, key: [ip], algorithm: sliding_window, limits: [{requests: 1, per: 1s}]}
  - {id: fw, key: [ip], algorithm: fixed_window, limits: [{requests: 1, per: 1s}]}
  - {id: tb, key: [ip], algorithm: token_bucket, limits: [{rate: 1, per: 1s, burst: 1}]}
  - {id: swc, key: [ip], algorithm: sliding_window_counter, limits: [{requests: 1, per: 1s}]}
  - id: multi
    key: [user_id, attr:app_key, method, tier, endpoint]
    algorithm: token_bucket
    limits: [{rate: 1, per: 1s, burst: 1}]
  - {id: pair, key: [user_id, attr:x], algorithm: fixed_window, limits: [{requests: 1, per: 1s}]}
`

// maxKeyLen bounds every key: prefix, braces, rule id, '|', subject, suffix.
const maxKeyLen = maxPrefix + 1 + 64 + 1 + maxSubject + 1 + len(holdSuffix)

// redisHashTag returns what Redis Cluster hashes for key.
func redisHashTag(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return key
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return key
	}
	return key[i+1 : i+1+j]
}

// checkKeyShape checks the hash tag and length properties of k for rule.
func checkKeyShape(t *testing.T, prefix, rule string, k keysOf) {
	t.Helper()
	tag := redisHashTag(k.State)
	if !strings.HasPrefix(tag, rule+"|") {
		t.Fatalf("hash tag %q does not start with the rule id", tag)
	}
	if !strings.HasPrefix(k.State, prefix+"{"+tag+"}:") {
		t.Fatalf("state key %q is not <prefix>{tag}:suffix", k.State)
	}
	if strings.ContainsAny(tag[len(rule)+1:], "{}") || strings.Count(k.State, "}") != 1 {
		t.Fatalf("braces inside the subject: %q", k.State)
	}
	if k.Hold != prefix+"{"+tag+"}:hold" || k.Hits != prefix+"{"+tag+"}:hits" {
		t.Fatalf("keys do not share the tag: %+v", k)
	}
	for _, key := range []string{k.State, k.Hold, k.Hits} {
		if len(key) > maxKeyLen {
			t.Fatalf("key %d bytes long: %q", len(key), key)
		}
	}
}

type keysOf = struct{ State, Hold, Hits string }

func keysFor(t *testing.T, s *Set, id string, r *Request) keysOf {
	t.Helper()
	k, ok := s.Rule(id).Keys(r)
	if !ok {
		t.Fatalf("rule %s: no keys for %+v", id, r)
	}
	return keysOf(k)
}

func TestKeysLayout(t *testing.T) {
	s := mustCompile(t, keysYAML)
	r := request("203.0.113.7", "/api/books/17")
	r.UserID, r.Method, r.Tier = "u-42", "get", "vip"
	r.Attributes = map[string]string{"app_key": "k-1"}
	tests := []struct{ rule, state string }{
		{"by-ip", "rw:{by-ip|ip=203.0.113.7}:sw2"},
		{"fw", "rw:{fw|ip=203.0.113.7}:fw"},
		{"tb", "rw:{tb|ip=203.0.113.7}:tb"},
		{"swc", "rw:{swc|ip=203.0.113.7}:swc"},
		{"multi", "rw:{multi|user_id=u-42|attr:app_key=k-1|method=GET|tier=VIP|endpoint=/api/books/17}:tb"},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			k := keysFor(t, s, tt.rule, r)
			if k.State != tt.state {
				t.Errorf("state = %q, want %q", k.State, tt.state)
			}
			tag := tt.state[:strings.LastIndexByte(tt.state, ':')]
			if k.Hold != tag+":hold" || k.Hits != tag+":hits" {
				t.Errorf("hold, hits = %q, %q", k.Hold, k.Hits)
			}
		})
	}
	t.Run("prefix", func(t *testing.T) {
		s2, err := Compile(mustParse(t, keysYAML), Options{KeyPrefix: "prod:rl:"})
		if err != nil {
			t.Fatal(err)
		}
		if k := keysFor(t, s2, "by-ip", r); k.State != "prod:rl:{by-ip|ip=203.0.113.7}:sw2" {
			t.Errorf("state = %q", k.State)
		}
	})
	t.Run("method and tier case-insensitive", func(t *testing.T) {
		r2 := *r
		r2.Method, r2.Tier = "GET", "VIP"
		if keysFor(t, s, "multi", r) != keysFor(t, s, "multi", &r2) {
			t.Error("get/vip and GET/VIP give different keys")
		}
	})
}

const ipv6KeysYAML = `
rules:
  - {id: v6-default, key: [ip], algorithm: fixed_window, limits: [{requests: 1, per: 1s}]}
  - {id: v6-48, key: [ip], algorithm: fixed_window, limits: [{requests: 1, per: 1s}], ipv6_prefix: 48}
  - {id: v6-none, key: [ip], algorithm: fixed_window, limits: [{requests: 1, per: 1s}], ipv6_prefix: 128}
  - {id: v6-pair, key: [ip, user_id], algorithm: fixed_window, limits: [{requests: 1, per: 1s}]}
`

// The ip dimension of an IPv6 client is its prefix (default /64, per
// rule), so the addresses of one prefix share their keys; IPv4 addresses
// are never grouped.
func TestKeysGroupIPv6ByPrefix(t *testing.T) {
	s := mustCompile(t, ipv6KeysYAML)
	tests := []struct{ rule, ip, state string }{
		{"v6-default", "2001:db8:1:2:3:4:5:6", "rw:{v6-default|ip=2001:db8:1:2::/64}:fw"},
		{"v6-default", "2001:db8:1:2::ffff", "rw:{v6-default|ip=2001:db8:1:2::/64}:fw"},
		{"v6-default", "2001:db8:1:3::1", "rw:{v6-default|ip=2001:db8:1:3::/64}:fw"},
		{"v6-default", "203.0.113.7", "rw:{v6-default|ip=203.0.113.7}:fw"},
		{"v6-48", "2001:db8:1:2:3:4:5:6", "rw:{v6-48|ip=2001:db8:1::/48}:fw"},
		{"v6-48", "2001:db8:1:ffff::1", "rw:{v6-48|ip=2001:db8:1::/48}:fw"},
		{"v6-48", "203.0.113.7", "rw:{v6-48|ip=203.0.113.7}:fw"},
		{"v6-none", "2001:db8:1:2:3:4:5:6", "rw:{v6-none|ip=2001:db8:1:2:3:4:5:6}:fw"},
		{"v6-pair", "2001:db8:1:2:3:4:5:6", "rw:{v6-pair|ip=2001:db8:1:2::/64|user_id=u-1}:fw"},
	}
	for _, tt := range tests {
		t.Run(tt.rule+" "+tt.ip, func(t *testing.T) {
			r := request(tt.ip, "/x")
			r.UserID = "u-1"
			k := keysFor(t, s, tt.rule, r)
			if k.State != tt.state {
				t.Errorf("state = %q, want %q", k.State, tt.state)
			}
			checkKeyShape(t, "rw:", tt.rule, k)
			// A request built from the text alone (no Addr) keys the same.
			if k2 := keysFor(t, s, tt.rule, &Request{IP: r.IP, UserID: "u-1"}); k2 != k {
				t.Errorf("without Addr: %q, want %q", k2.State, k.State)
			}
		})
	}
	t.Run("match agrees with Keys", func(t *testing.T) {
		r := request("2001:db8:1:2:3:4:5:6", "/x")
		r.UserID = "u-1"
		for _, a := range s.Match(r, time.Now(), nil) {
			if k := keysFor(t, s, a.Rule.ID, r); k != keysOf(a.Call.Keys) {
				t.Errorf("rule %s: Match keys %q, Keys %q", a.Rule.ID, a.Call.Keys.State, k.State)
			}
		}
	})
}

// Rules sharing a grouping format an IPv6 client's prefix once per request.
func TestMatchAllocatesOnceMoreForAnIPv6Client(t *testing.T) {
	s := mustCompile(t, ipv6KeysYAML)
	r := request("2001:db8:1:2:3:4:5:6", "/x")
	r.UserID = "u-1"
	out := make([]Applied, 0, 8)
	now := time.Now()
	n := len(s.Match(r, now, out))
	// v6-default and v6-pair share /64; v6-48 formats its own; v6-none
	// uses the address as it is.
	if allocs := testing.AllocsPerRun(100, func() { out = s.Match(r, now, out[:0]) }); allocs != float64(n+2) {
		t.Errorf("Match allocates %v times for %d rules, want %d", allocs, n, n+2)
	}
}

// A user id already folded (ASCII, no upper case) costs no allocation
// beyond the keys: one per applied rule.
func TestMatchAllocatesNothingToFoldAFoldedUserID(t *testing.T) {
	s := mustCompile(t, keysYAML)
	r := request("198.51.100.1", "/x")
	r.UserID, r.Attributes = "u-42@example.com", map[string]string{"x": "c", "app_key": "k"}
	out := make([]Applied, 0, 8)
	now := time.Now()
	n := len(s.Match(r, now, out))
	if allocs := testing.AllocsPerRun(100, func() { out = s.Match(r, now, out[:0]) }); allocs != float64(n) {
		t.Errorf("Match allocates %v times for %d rules, want %d", allocs, n, n)
	}
}

func TestKeyPrefixValidation(t *testing.T) {
	f := mustParse(t, keysYAML)
	for _, p := range []string{"a{b", "a}b", "a b", "x\n", strings.Repeat("p", 65)} {
		t.Run(fmt.Sprintf("%q", p), func(t *testing.T) {
			if _, err := Compile(f, Options{KeyPrefix: p}); err == nil {
				t.Fatalf("prefix %q accepted", p)
			}
		})
	}
}

var hostileValues = []string{
	"a", "a}b", "{x}", "}", "{", "}}}{{{", "a|ip=b", "u=1", "x:y", "sp ace", "%41", "A", "%",
	"#abc", "#" + strings.Repeat("0", 32), "\x00\n", "é", "\xff", "a|attr:x=b", "a%7Cattr:x=b",
	strings.Repeat("z", 10<<10), strings.Repeat("z", 10<<10) + "1", strings.Repeat("}", 200),
	strings.Repeat("y", 89), strings.Repeat("y", 90), strings.Repeat("y", 91),
}

// Distinct values give distinct keys (user ids compared exactly: folding
// merges spellings on purpose, see TestUserKeysFold).
func TestKeysHostileValues(t *testing.T) {
	s, err := Compile(mustParse(t, keysYAML), Options{CaseSensitiveUserIDs: true})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, v := range hostileValues {
		t.Run(truncate(fmt.Sprintf("%q", v), 40), func(t *testing.T) {
			r := request("198.51.100.1", "/x")
			r.UserID = v
			r.Attributes = map[string]string{"x": "c"}
			k := keysFor(t, s, "pair", r)
			checkKeyShape(t, "rw:", "pair", k)
			if prev, dup := seen[k.State]; dup {
				t.Fatalf("%q and %q share key %q", v, prev, k.State)
			}
			seen[k.State] = v
		})
	}
}

// Every spelling of one user id is one key by default: the budget of a
// rule keyed by user_id is the account's, however it is spelled; with
// CaseSensitiveUserIDs each spelling is a key of its own.
func TestUserKeysFold(t *testing.T) {
	spellings := []string{"dave", "Dave", "dAve", "DAVE", "ｄａｖｅ"}
	for _, tc := range []struct {
		opts Options
		keys int
	}{{Options{}, 1}, {Options{CaseSensitiveUserIDs: true}, len(spellings)}} {
		s, err := Compile(mustParse(t, keysYAML), tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		keys := map[string]bool{}
		for _, u := range spellings {
			r := request("198.51.100.1", "/x")
			r.UserID = u
			r.Attributes = map[string]string{"x": "c"}
			keys[keysFor(t, s, "pair", r).State] = true
		}
		if len(keys) != tc.keys {
			t.Errorf("%+v: %d keys for %q, want %d: %v", tc.opts, len(keys), spellings, tc.keys, keys)
		}
		if got, want := s.UserKey("DAVE"), map[bool]string{false: "dave", true: "DAVE"}[tc.opts.CaseSensitiveUserIDs]; got != want {
			t.Errorf("%+v: UserKey(DAVE) = %q, want %q", tc.opts, got, want)
		}
	}
}

func TestKeysNoCrossDimensionCollision(t *testing.T) {
	s := mustCompile(t, keysYAML)
	pairs := [][2]string{
		{"a|attr:x=b", "c"}, {"a", "b|attr:x=c"}, {"a", "b"}, {"a=", "b"}, {"a", "=b"},
		{"a%7C", "b"}, {"a|", "b"}, {"a}", "b"}, {strings.Repeat("q", 50), strings.Repeat("q", 50)},
		{strings.Repeat("q", 49), strings.Repeat("q", 51)},
	}
	seen := map[string][2]string{}
	for _, p := range pairs {
		r := request("198.51.100.1", "/x")
		r.UserID = p[0]
		r.Attributes = map[string]string{"x": p[1]}
		k := keysFor(t, s, "pair", r)
		checkKeyShape(t, "rw:", "pair", k)
		if prev, dup := seen[k.State]; dup {
			t.Fatalf("%q and %q share key %q", p, prev, k.State)
		}
		seen[k.State] = p
	}
}

func TestKeysLongSubjectIsHashed(t *testing.T) {
	s := mustCompile(t, keysYAML)
	r := request("198.51.100.1", "/x")
	r.UserID = strings.Repeat("u", 10<<10)
	r.Attributes = map[string]string{"x": "c"}
	k := keysFor(t, s, "pair", r)
	tag := redisHashTag(k.State)
	if !strings.HasPrefix(tag, "pair|#") || len(tag) != len("pair|#")+32 {
		t.Fatalf("tag = %q, want pair|# and 32 hex digits", tag)
	}
	// 96 escaped bytes stays readable; 97 is hashed.
	r.UserID = strings.Repeat("u", maxSubject-len("user_id=|attr:x=c"))
	if tag := redisHashTag(keysFor(t, s, "pair", r).State); strings.Contains(tag, "#") {
		t.Errorf("96-byte subject hashed: %q", tag)
	}
	r.UserID += "u"
	if tag := redisHashTag(keysFor(t, s, "pair", r).State); !strings.Contains(tag, "#") {
		t.Errorf("97-byte subject not hashed: %q", tag)
	}
}

func TestKeysAllocateOnce(t *testing.T) {
	s := mustCompile(t, keysYAML)
	r := request("203.0.113.7", "/api/books/17")
	r.UserID, r.Method, r.Tier = "u-42", "GET", "VIP"
	r.Attributes = map[string]string{"app_key": "k-1"}
	rule := s.Rule("multi")
	if n := testing.AllocsPerRun(100, func() { rule.Keys(r) }); n != 1 {
		t.Errorf("Keys allocates %v times, want 1", n)
	}
}

func FuzzKeys(f *testing.F) {
	f.Add("a", "b", "a", "b")
	f.Add("a|attr:x=b", "c", "a", "b|attr:x=c")
	f.Add("}", "{", "%7D", "%7B")
	f.Add(strings.Repeat("x", 100), "y", strings.Repeat("x", 100), "z")
	f.Add("0 ", "0", "0", "0")
	s := mustCompile(f, keysYAML)
	rule := s.Rule("pair")
	f.Fuzz(func(t *testing.T, u1, x1, u2, x2 string) {
		if u1 == "" || x1 == "" || u2 == "" || x2 == "" {
			return
		}
		k1, _ := rule.Keys(&Request{UserID: u1, Attributes: map[string]string{"x": x1}})
		k2, _ := rule.Keys(&Request{UserID: u2, Attributes: map[string]string{"x": x2}})
		checkKeyShape(t, "rw:", "pair", keysOf(k1))
		checkKeyShape(t, "rw:", "pair", keysOf(k2))
		// A user id counts as its key: spellings of one account are one.
		if same := s.UserKey(u1) == s.UserKey(u2) && x1 == x2; same != (k1.State == k2.State) {
			t.Fatalf("(%q,%q) and (%q,%q): keys %q and %q", u1, x1, u2, x2, k1.State, k2.State)
		}
	})
}
