package rules

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// benchYAML builds 20 rules of every shape: literal and wildcard endpoints,
// method and tier matches, several key dimensions, a schedule, escalations.
func benchYAML() string {
	var b strings.Builder
	b.WriteString("rules:\n")
	endpoints := []string{`"/api/login"`, `"/api/books/**"`, `"/api/users/*/orders/**"`, `"/api/*/search"`, `"/**/export"`}
	for i := range 20 {
		fmt.Fprintf(&b, `  - id: rule-%02d
    priority: %d
    match: {endpoints: [%s, "/v%d/**"], methods: [GET, POST]}
    key: [ip, user_id]
    algorithm: sliding_window
    limits: [{requests: 10, per: 1s}, {requests: 100, per: 1m}]
    tiers: {VIP: [{requests: 100, per: 1s}]}
    schedule: [{daily: {from: "02:00", to: "04:00", tz: Europe/Paris}, limits: [{requests: 1, per: 1s}]}]
    escalate: [{triggers: 3, within: 10m, penalty: 1h, from: 2026-01-01T00:00:00Z}]
`, i, i%5*10, endpoints[i%len(endpoints)], i)
	}
	b.WriteString("exempt: {ips: [10.0.0.0/8], endpoints: [/healthz], tiers: [ADMIN]}\n")
	return b.String()
}

func BenchmarkMatch(b *testing.B) {
	s := mustCompile(b, benchYAML())
	r := request("203.0.113.9", "/api/books/17")
	r.UserID, r.Tier = "u-42", "VIP"
	now := time.Now()
	out := make([]Applied, 0, 8)
	if n := len(s.Match(r, now, out)); n != 4 {
		b.Fatalf("%d rules apply, want 4", n)
	}
	b.ReportAllocs()
	for b.Loop() {
		out = s.Match(r, now, out[:0])
	}
}

// BenchmarkMatchUserIDs is the cost of folding user ids on the decision
// path: the 4 rules of BenchmarkMatch that apply are keyed by user_id,
// whose key (userid.Fold) Match computes once per request, against the same
// rules with case-sensitive user ids. An ASCII id already folded costs a
// scan and no allocation; another ASCII spelling one allocation; an id
// beyond ASCII the normalization passes.
//
//	go test -run '^$' -bench MatchUserIDs -benchmem ./internal/rules/
func BenchmarkMatchUserIDs(b *testing.B) {
	for _, exact := range []bool{false, true} {
		s, err := Compile(mustParse(b, benchYAML()), Options{CaseSensitiveUserIDs: exact})
		if err != nil {
			b.Fatal(err)
		}
		for _, id := range []string{"u-42@example.com", "U-42@Example.com", "jürgen.straße"} {
			b.Run(fmt.Sprintf("case-sensitive=%v/%s", exact, id), func(b *testing.B) {
				r := request("203.0.113.9", "/api/books/17")
				r.UserID = id
				now := time.Now()
				out := make([]Applied, 0, 8)
				b.ReportAllocs()
				for b.Loop() {
					out = s.Match(r, now, out[:0])
				}
			})
		}
	}
}

func BenchmarkMatchParallel(b *testing.B) {
	s := mustCompile(b, benchYAML())
	now := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		r := request("203.0.113.9", "/api/books/17")
		r.UserID = "u-42"
		out := make([]Applied, 0, 8)
		for pb.Next() {
			if s.Exempt(r) {
				b.Fatal("exempt")
			}
			out = s.Match(r, now, out[:0])
		}
	})
}
