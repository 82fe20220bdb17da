package rules

import (
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
)

const descriptorHoldsYAML = `
rules:
  - id: streams
    descriptor: {domain: edge, entries: [{key: api_key}], name: streams}
    algorithm: concurrency
    limits: [{concurrent: 3, hold: 30s}]
  - id: uploads
    descriptor: {domain: edge, entries: [{key: upload}], release: oldest}
    algorithm: concurrency
    limits: [{concurrent: 2}]
  - id: per-path
    descriptor: {domain: edge, entries: [{key: api_key}, {key: path}], replaces: [streams]}
    algorithm: fixed_window
    limits: [{requests: 10, per: 1s}]
`

// TestMatchDescriptorReleases: a descriptor ending in a hold entry below a
// concurrency rule's path releases on the key the request-time descriptor
// takes its hold on: the hold it names, or, naming none, the oldest only
// where the rule says release: oldest. Nothing replaces a release.
func TestMatchDescriptorReleases(t *testing.T) {
	s := mustCompile(t, descriptorHoldsYAML)
	id := decide.NewHoldID()
	now := time.Now()
	desc := func(cost int64, entries ...Entry) Descriptor { return Descriptor{Entries: entries, Cost: cost} }
	req := &DescriptorRequest{Domain: "edge", Descriptors: []Descriptor{
		desc(1, Entry{"api_key", "k1"}),                          // 0: a take
		desc(0, Entry{"api_key", "k1"}),                          // 1: would one fit
		desc(5, Entry{"api_key", "k1"}, Entry{"hold", id}),       // 2: release of id
		desc(1, Entry{"api_key", "k1"}, Entry{"hold", "-"}),      // 3: no id, rule releases by id only
		desc(1, Entry{"upload", "u1"}, Entry{"hold", "release"}), // 4: no id, the oldest
		desc(1, Entry{"upload", "u1"}, Entry{"hold", id}),        // 5: an id, released by id
		desc(1, Entry{"other", "x"}, Entry{"hold", id}),          // 6: matches nothing
	}}
	as := s.MatchDescriptors(req, now, nil)
	type want struct {
		desc           int
		rule           string
		cost           int64
		release        bool
		hold           string
		noRelease      bool
		sameKeyAsIndex int
	}
	wants := []want{
		{0, "streams", 1, false, "", false, 0},
		{1, "streams", 0, false, "", false, 0},
		{2, "streams", 0, true, id, false, 0},
		{3, "streams", 0, true, "", true, 0},
		{4, "uploads", 0, true, "", false, -1},
		{5, "uploads", 0, true, id, false, -1},
	}
	if len(as) != len(wants) {
		t.Fatalf("applied %v, want %d", ids(as), len(wants))
	}
	for i, w := range wants {
		a := as[i]
		c := a.Call
		if a.Descriptor != w.desc || a.Rule.ID != w.rule || c.Cost != w.cost || c.Release != w.release ||
			c.HoldID != w.hold || a.NoRelease != w.noRelease || c.DebitDenied {
			t.Errorf("applied[%d] = desc %d rule %s cost %d release %v hold %q noRelease %v debit %v, want %+v",
				i, a.Descriptor, a.Rule.ID, c.Cost, c.Release, c.HoldID, a.NoRelease, c.DebitDenied, w)
		}
		if w.sameKeyAsIndex >= 0 && c.Keys != as[w.sameKeyAsIndex].Call.Keys {
			t.Errorf("applied[%d] keys %v, want the take's %v", i, c.Keys, as[w.sameKeyAsIndex].Call.Keys)
		}
		if !c.Release {
			c.HoldID = id // the limiter names the takes
		}
		if err := c.Validate(); err != nil && !a.NoRelease {
			t.Errorf("applied[%d]: %v", i, err)
		}
	}
	if as[4].Call.Keys != as[5].Call.Keys {
		t.Errorf("the two releases of upload u1 name different keys")
	}

	// per-path replaces streams: its take is dropped, never its release.
	req.Descriptors = append(req.Descriptors[:3:3], desc(1, Entry{"api_key", "k1"}, Entry{"path", "/x"}))
	if got := ids(s.MatchDescriptors(req, now, nil)); len(got) != 2 || got[0] != "streams" || got[1] != "per-path" {
		t.Errorf("with a rule replacing streams: applied %v, want [streams per-path] (the release alone)", got)
	}
}
