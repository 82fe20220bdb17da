package abuse_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/event"
)

var update = flag.Bool("update", false, "rewrite the generated testdata/*.jsonl and *.rules.yaml")

// fixture is the input of one replay: events in file (arrival) order, and
// an optional rules file (default: "rules: []", so default detection).
type fixture struct {
	events []event.Decision
	rules  string
}

// fixtureStart is when every fixture begins.
var fixtureStart = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

// afterFixtures is the detector's clock in tests of fixture events: a day
// after they begin, so that no fixture event is ahead of it, whatever the
// machine's calendar says.
func afterFixtures() time.Time { return fixtureStart.Add(24 * time.Hour) }

// gen builds the events of one fixture.
type gen struct {
	name   string
	events []event.Decision
}

// add appends an event at fixtureStart+ms (plus some microseconds, as real
// events have): denied ones are rate limited, unless reason says otherwise.
func (g *gen) add(ms int64, ip, user, endpoint string, allowed bool, reason ...string) {
	r := event.ReasonOK
	if !allowed {
		r = event.ReasonRateLimited
	}
	if len(reason) > 0 {
		r = reason[0]
	}
	n := len(g.events)
	d := event.Decision{
		EventID: fmt.Sprintf("%s-%05d", g.name, n), TS: fixtureStart.Add(time.Duration(ms)*time.Millisecond + time.Duration(n%997)*time.Microsecond),
		Instance: "limiter-1", UserID: user, IP: ip, Endpoint: endpoint, Method: "GET", RuleID: "books-by-ip",
		Algorithm: "sliding_window", Allowed: allowed, Reason: r, Limit: 10, Mode: "redis",
	}
	if !allowed {
		d.RetryAfterMS = 500
	}
	g.events = append(g.events, d)
}

// normal adds background traffic: users u-1..u-n from 198.51.100.x, each a
// request every 2.5s for the duration, over a handful of endpoints, one in
// 25 denied. Events are appended sorted by time.
func (g *gen) normal(users int, fromMs, toMs int64) {
	endpoints := []string{"/api/books/1", "/api/books/2", "/api/books/3", "/api/cart", "/api/profile", "/api/login"}
	var evs []event.Decision
	saved := g.events
	g.events = nil
	for u := 1; u <= users; u++ {
		for i, ms := 0, fromMs+int64(u)*97; ms < toMs; i, ms = i+1, ms+2500 {
			g.add(ms, fmt.Sprintf("198.51.100.%d", u), fmt.Sprintf("u-%d", u), endpoints[(i+u)%len(endpoints)], (i+u)%25 != 0)
		}
	}
	evs = g.events
	slices.SortStableFunc(evs, func(a, b event.Decision) int { return a.TS.Compare(b.TS) })
	g.events = saved
	for _, e := range evs {
		e.EventID = fmt.Sprintf("%s-%05d", g.name, len(g.events))
		g.events = append(g.events, e)
	}
}

// scan adds count requests from ip to distinct endpoints every stepMs.
func (g *gen) scan(ip string, fromMs, stepMs int64, count int, prefix string) {
	for i := range count {
		g.add(fromMs+int64(i)*stepMs, ip, "", fmt.Sprintf("%s/%d", prefix, i), true)
	}
}

func fixtures() map[string]fixture {
	all := map[string]fixture{}
	build := func(name, rules string, f func(g *gen)) {
		g := &gen{name: name}
		f(g)
		all[name] = fixture{events: g.events, rules: rules}
	}
	build("normal", "", func(g *gen) { g.normal(6, 0, 6*60*1000) })
	build("scan", "", func(g *gen) {
		g.normal(3, 0, 4000)
		g.scan("203.0.113.50", 5000, 100, 60, "/api/items")
		g.normal(3, 12000, 30000)
	})
	build("slow_bruteforce", "", func(g *gen) {
		// Four bursts of 25 denials, 3s apart, 16 minutes apart: a warning
		// per burst (not two), and the ban at the 100th denial.
		for b := range int64(4) {
			for i := range int64(25) {
				g.add(b*16*60*1000+i*3000, "203.0.113.66", "", "/api/login", false)
			}
		}
		slices.SortStableFunc(g.events, func(a, b event.Decision) int { return a.TS.Compare(b.TS) })
		for i := range g.events {
			g.events[i].EventID = fmt.Sprintf("%s-%05d", g.name, i)
		}
	})
	build("under_thresholds", "", func(g *gen) {
		// 49 distinct endpoints within 10s (the first falls out of the
		// window, inclusive, when the 50th arrives 10.001s later).
		for i := range int64(49) {
			g.add(i*200, "203.0.113.70", "", fmt.Sprintf("/e/%d", i), true)
		}
		g.add(10001, "203.0.113.70", "", "/e/49", true)
		// 19 denials within 3 minutes.
		for i := range int64(19) {
			g.add(20000+i*10000, "203.0.113.71", "u-b", "/api/login", false)
		}
		// 99 denials in 55 minutes, never 20 within 5 minutes.
		for i := range int64(99) {
			g.add(30000+i*33000, "203.0.113.72", "", "/api/search", false)
		}
		slices.SortStableFunc(g.events, func(a, b event.Decision) int { return a.TS.Compare(b.TS) })
		for i := range g.events {
			g.events[i].EventID = fmt.Sprintf("%s-%05d", g.name, i)
		}
	})
	build("out_of_order", "", func(g *gen) {
		// A scan whose first half arrives after its second half (late by
		// under 5s, within the 30s grace): still a ban.
		for i := int64(25); i < 50; i++ {
			g.add(i*100, "203.0.113.80", "", fmt.Sprintf("/x/%d", i), true)
		}
		for i := range int64(25) {
			g.add(i*100, "203.0.113.80", "", fmt.Sprintf("/x/%d", i), true)
		}
		// 25 endpoints in time, then, after the stream reached 100s, 30
		// more dated 65-68s: beyond the grace, ignored (no scan ban).
		g.scan("203.0.113.81", 60000, 100, 25, "/y")
		g.add(100000, "198.51.100.1", "u-1", "/api/books/1", true)
		g.scan("203.0.113.81", 65000, 100, 30, "/z")
	})
	build("duplicates", "", func(g *gen) {
		// Every event twice in a row, then the whole stream again.
		twice := func() { g.events = append(g.events, g.events[len(g.events)-1]) }
		for i := range int64(60) {
			g.add(i*100, "203.0.113.90", "", fmt.Sprintf("/api/items/%d", i), true)
			twice()
		}
		// 15 denials, each delivered twice: 15 violations, no warning.
		for i := range int64(15) {
			g.add(7000+i*1000, "203.0.113.91", "", "/api/login", false)
			twice()
		}
		g.events = append(g.events, slices.Clone(g.events)...)
	})
	build("banned_reason", "", func(g *gen) {
		// A banned client keeps hammering: 150 denials and 60 endpoints in
		// a minute, all with reason banned (plus exempt decisions).
		for i := range int64(150) {
			g.add(i*400, "203.0.113.100", "u-banned", fmt.Sprintf("/api/items/%d", i%60), false, event.ReasonBanned)
		}
		for i := range int64(60) {
			g.add(i*100, "203.0.113.101", "", fmt.Sprintf("/internal/%d", i), true, event.ReasonExempt)
		}
		slices.SortStableFunc(g.events, func(a, b event.Decision) int { return a.TS.Compare(b.TS) })
		for i := range g.events {
			g.events[i].EventID = fmt.Sprintf("%s-%05d", g.name, i)
		}
	})
	build("user_many_ips", "", func(g *gen) {
		// One user, 5 addresses in turn, a denial every 17s: no address
		// and no 5-minute window reaches a threshold, the user's hour does.
		for i := range int64(100) {
			g.add(i*17000, fmt.Sprintf("203.0.113.%d", 110+i%5), "u-mallory", "/api/login", false)
		}
	})
	build("escalation", "", func(g *gen) {
		// Two scans: the second after the first ban expired lasts twice as
		// long.
		g.scan("203.0.113.120", 0, 100, 55, "/a")
		g.scan("203.0.113.120", 3600*1000+60000, 100, 55, "/b")
	})
	build("exempt", "rules: []\nexempt:\n  ips: [\"203.0.113.128/30\"]\n  users: [u-vip]\n", func(g *gen) {
		g.scan("203.0.113.130", 0, 100, 60, "/api/items")
		for i := range int64(200) {
			g.add(i*500, "203.0.113.140", "u-vip", "/api/login", false)
		}
		slices.SortStableFunc(g.events, func(a, b event.Decision) int { return a.TS.Compare(b.TS) })
		for i := range g.events {
			g.events[i].EventID = fmt.Sprintf("%s-%05d", g.name, i)
		}
	})
	build("dry_run", "rules: []\ndetection:\n  dry_run: true\n", func(g *gen) {
		g.scan("203.0.113.150", 0, 100, 60, "/api/items")
	})
	return all
}

func encodeJSONL(evs []event.Decision) []byte {
	var b []byte
	for i := range evs {
		b = evs[i].AppendJSON(b)
		b = append(b, '\n')
	}
	return b
}

// TestFixturesGenerated keeps testdata/*.jsonl (and *.rules.yaml) equal to
// what fixtures() generates; run with -update to rewrite them.
func TestFixturesGenerated(t *testing.T) {
	for name, f := range fixtures() {
		files := map[string][]byte{filepath.Join("testdata", name+".jsonl"): encodeJSONL(f.events)}
		if f.rules != "" {
			files[filepath.Join("testdata", name+".rules.yaml")] = []byte(f.rules)
		}
		for path, want := range files {
			if *update {
				if err := os.WriteFile(path, want, 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -run TestFixturesGenerated -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from its generator (run go test -run TestFixturesGenerated -update)", path)
			}
		}
	}
}

func secs(s int64) time.Duration { return time.Duration(s) * time.Second }
