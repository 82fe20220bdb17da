package abuse_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/testkit/abusetest"
)

// want is a testdata/*.want.json file: what replaying the sibling .jsonl
// must produce.
type want struct {
	Late     int           `json:"late"`
	Skipped  int           `json:"skipped"`
	Outcomes []wantOutcome `json:"outcomes"`
}

type wantOutcome struct {
	Action    string `json:"action"`
	Scope     string `json:"scope"`
	Subject   string `json:"subject"`
	Reason    string `json:"reason"`
	Count     int64  `json:"count"`
	Threshold int64  `json:"threshold"`
	WindowS   int64  `json:"window_s"`
	DurationS int64  `json:"duration_s"`
	DryRun    bool   `json:"dry_run"`
}

// replay is the result of running a fixture through an engine.
type replay struct {
	outcomes []abuse.Claimed
	stats    abuse.Stats
	enforced []event.Ban
}

// runReplay feeds events to a fresh engine with memory windows and ledger,
// batch events at a time; the engine publishes (here: collects) and
// settles what each batch triggers.
func runReplay(t *testing.T, set *rules.Set, events []event.Decision, batch int) replay {
	t.Helper()
	ctx := context.Background()
	ledger := abusetest.NewMemoryLedger()
	exempt := func(s event.Subject) bool {
		return set.Exempt(&rules.Request{UserID: s.UserID, IP: s.IP, Endpoint: s.Endpoint, Method: s.Method, Tier: s.Tier})
	}
	pub := &abusetest.Published{}
	e := abuse.NewEngine(abuse.Config{Detection: set.Detection(), Exempt: exempt, Now: afterFixtures}, abusetest.NewMemoryWindows(), ledger, pub)
	r := replay{stats: abuse.Stats{Warnings: map[string]int{}, Bans: map[string]int{}}}
	for from := 0; from < len(events); from += batch {
		var in []abuse.Input
		for _, ev := range events[from:min(from+batch, len(events))] {
			in = append(in, abuse.Input{Partition: 0, Event: ev})
		}
		out, st, err := e.Process(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range out {
			if _, err := event.EncodeBan(o.Ban); err != nil {
				t.Errorf("outcome does not encode: %v", err)
			}
		}
		r.outcomes = append(r.outcomes, out...)
		r.stats.Consumed += st.Consumed
		r.stats.Late += st.Late
		r.stats.Skipped += st.Skipped
		for k, v := range st.Warnings {
			r.stats.Warnings[k] += v
		}
		for k, v := range st.Bans {
			r.stats.Bans[k] += v
		}
	}
	r.enforced = ledger.Enforced()
	if published := pub.Bans(); len(published) != len(r.outcomes) {
		t.Errorf("%d bans and warnings published, %d outcomes returned", len(published), len(r.outcomes))
	}
	return r
}

func loadFixture(t *testing.T, base string) (*rules.Set, []event.Decision, want) {
	t.Helper()
	rulesYAML := []byte("rules: []\n")
	if b, err := os.ReadFile(base + ".rules.yaml"); err == nil {
		rulesYAML = b
	} else if !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	f, err := rules.Parse(rulesYAML)
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.Compile(f, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(base + ".jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var events []event.Decision
	sc := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; sc.Scan(); line++ {
		d, err := event.DecodeDecision(sc.Bytes())
		if err != nil {
			t.Fatalf("%s.jsonl:%d: %v", base, line, err)
		}
		events = append(events, d)
	}
	var w want
	wb, err := os.ReadFile(base + ".want.json")
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(wb))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		t.Fatalf("%s.want.json: %v", base, err)
	}
	return set, events, w
}

func TestReplayFixtures(t *testing.T) {
	paths, err := filepath.Glob("testdata/*.jsonl")
	if err != nil || len(paths) < 11 {
		t.Fatalf("fixtures: %v, %v", paths, err)
	}
	for _, p := range paths {
		base := strings.TrimSuffix(p, ".jsonl")
		t.Run(filepath.Base(base), func(t *testing.T) {
			set, events, w := loadFixture(t, base)
			var first replay
			for _, batch := range []int{1, 7, len(events)} {
				r := runReplay(t, set, events, batch)
				if batch == 1 {
					first = r
					checkReplay(t, r, events, w)
					continue
				}
				if !reflect.DeepEqual(r.outcomes, first.outcomes) || !reflect.DeepEqual(r.stats, first.stats) {
					t.Errorf("batches of %d: outcomes or stats differ from batches of 1:\n got %+v\nwant %+v", batch, r, first)
				}
			}
		})
	}
}

func checkReplay(t *testing.T, r replay, events []event.Decision, w want) {
	t.Helper()
	got := make([]wantOutcome, len(r.outcomes))
	for i, o := range r.outcomes {
		b := o.Ban
		got[i] = wantOutcome{b.Action, b.Scope, b.Subject, b.Reason, b.Count, b.Threshold, b.WindowS, b.DurationS, b.DryRun}
		checkBan(t, b)
	}
	checkBanIDs(t, r.outcomes, events)
	if len(got) != len(w.Outcomes) || (len(got) > 0 && !reflect.DeepEqual(got, w.Outcomes)) {
		t.Errorf("outcomes:\n got %+v\nwant %+v", got, w.Outcomes)
	}
	if r.stats.Consumed != len(events) || r.stats.Late != w.Late || r.stats.Skipped != w.Skipped {
		t.Errorf("stats = %+v, want consumed %d, late %d, skipped %d", r.stats, len(events), w.Late, w.Skipped)
	}
	counted := map[string]int{}
	enforced := 0
	for _, o := range got {
		counted[o.Action+" "+o.Reason]++
		if o.Action == event.ActionBan && !o.DryRun {
			enforced++
		}
	}
	for reason, n := range r.stats.Bans {
		counted["ban "+reason] -= n
	}
	for reason, n := range r.stats.Warnings {
		counted["warn "+reason] -= n
	}
	for k, n := range counted {
		if n != 0 {
			t.Errorf("stats miscount %s by %d", k, -n)
		}
	}
	if len(r.enforced) != enforced {
		t.Errorf("%d bans enforced, want %d", len(r.enforced), enforced)
	}
}

// checkBan checks what every issued ban or warning must hold.
func checkBan(t *testing.T, b event.Ban) {
	t.Helper()
	ev := b.Evidence
	switch {
	case b.Source != abuse.SourceDetector:
		t.Errorf("%s: source %q", b.BanID, b.Source)
	case ev.FirstTS.IsZero() || ev.LastTS.Before(ev.FirstTS) || b.TS.Before(ev.FirstTS.Add(-1)):
		t.Errorf("%s: evidence %s .. %s for a ban at %s", b.BanID, ev.FirstTS, ev.LastTS, b.TS)
	case len(ev.SampleEndpoints) == 0 || len(ev.SampleEndpoints) > rules.DefaultSamples:
		t.Errorf("%s: %d sample endpoints", b.BanID, len(ev.SampleEndpoints))
	case b.Action == event.ActionBan && !b.ExpiresAt.Equal(b.TS.Add(secs(b.DurationS))):
		t.Errorf("%s: expires %s, ts %s + %ds", b.BanID, b.ExpiresAt, b.TS, b.DurationS)
	case b.Action == event.ActionWarn && !b.ExpiresAt.IsZero():
		t.Errorf("%s: warning expires %s", b.BanID, b.ExpiresAt)
	}
}

// checkBanIDs checks that every outcome has an id of its own, derived from
// an event of the stream (the one that triggered it).
func checkBanIDs(t *testing.T, outcomes []abuse.Claimed, events []event.Decision) {
	t.Helper()
	seen := map[string]bool{}
	for _, o := range outcomes {
		b := o.Ban
		if seen[b.BanID] {
			t.Errorf("%s %s of %s: id %s issued before", b.Action, b.Reason, b.Key(), b.BanID)
		}
		seen[b.BanID] = true
		idReason := b.Reason
		if b.Action == event.ActionWarn {
			idReason = "warn/" + b.Reason
		}
		if !slices.ContainsFunc(events, func(ev event.Decision) bool {
			return abuse.BanID(b.Scope, b.Subject, idReason, ev.EventID) == b.BanID
		}) {
			t.Errorf("%s %s of %s: id %s is not derived from any event of the stream", b.Action, b.Reason, b.Key(), b.BanID)
		}
	}
}
