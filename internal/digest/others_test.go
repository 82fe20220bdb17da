package digest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/event"
)

// Anyone who may write to the bans topic may publish, within one window,
// messages of distinct reasons ("scenario_0", "scenario_1", ...). Were
// every group its own digest, so its own webhook POST, 3000 warnings would
// be 3000 posts to each receiver: a Slack webhook takes about one message a
// second (then 429, retried without end), so the window would take the
// better part of an hour to close while the channel is flooded, and every
// real ban published meanwhile would wait behind it. A receiver's digests
// of one window are bounded (the largest groups, then one digest of the
// rest with their counts): what a window costs a receiver does not grow
// with the variety of the messages.
func TestDistinctScenariosDoNotMultiplyDigests(t *testing.T) {
	now := time.Now().UTC()
	b := NewBuilder(now.Truncate(time.Minute), now.Truncate(time.Minute).Add(time.Minute), 5)
	for i := range 3000 {
		b.Add("slack", &event.Ban{BanID: fmt.Sprint("w", i), TS: now, Action: event.ActionWarn, Scope: event.ScopeIP,
			Subject: "192.0.2.1", Reason: fmt.Sprint("scenario_", i)})
	}
	const bound = 100 // generous: a detector has a few dozen scenarios
	if n := len(b.Digests()); n > bound {
		t.Errorf("3000 warnings of distinct reasons in one window: %d digests (so %d posts) for one receiver, want at most %d", n, n, bound)
	}
}

// The digest of the rest is a function of the bans like every other: the
// largest groups keep theirs (ties broken by the group, not by arrival),
// the rest's counts add up, and the order the bans came in changes
// neither content nor keys.
func TestDigestOfTheRestIsAFunctionOfTheBans(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	var bans []event.Ban
	for g, n := range []int{7, 5, 5, 3, 1, 1, 1} { // groups s0..s6, of n bans each
		for i := range n {
			bans = append(bans, event.Ban{BanID: fmt.Sprint("b", g, "-", i), TS: t0.Add(time.Duration(g+i) * time.Second),
				Action: event.ActionWarn, Scope: event.ScopeIP, Subject: fmt.Sprint("192.0.2.", i), Reason: fmt.Sprint("s", g)})
		}
	}
	bans[len(bans)-1].Action = event.ActionBan // the rest mixes actions
	digests := func(order []int) []Digest {
		b := NewBuilder(t0, t0.Add(time.Minute), 2)
		b.LimitDigests(3)
		for _, i := range order {
			b.Add("siem", &bans[i])
		}
		return b.Digests()
	}
	order := make([]int, len(bans))
	for i := range order {
		order[i] = i
	}
	got := digests(order)
	if len(got) != 3 {
		t.Fatalf("%d digests, want the bound, 3", len(got))
	}
	var rest *Digest
	own := map[string]int{}
	for i := range got {
		if got[i].Others != nil {
			rest = &got[i]
			continue
		}
		own[got[i].Scenario] = got[i].Count
	}
	if own["s0"] != 7 || own["s1"] != 5 || len(own) != 2 {
		t.Errorf("own digests %v, want s0 (7) and s1 (5, before s2 of the same count)", own)
	}
	if rest == nil || rest.Count != 5+3+1+1+1 || rest.Action != Mixed || rest.Scope != event.ScopeIP ||
		len(rest.Others) != 5 || rest.Others[0] != (GroupCount{event.ActionWarn, event.ScopeIP, "s2", 5}) || len(rest.Examples) != 2 {
		t.Fatalf("digest of the rest %+v", rest)
	}
	for range 5 {
		shuffled := append([]int(nil), order...)
		rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		again := digests(append(shuffled, 3, 20)) // two redelivered
		for i := range got {
			if again[i].Key != got[i].Key || again[i].Count != got[i].Count || fmt.Sprint(again[i].Examples) != fmt.Sprint(got[i].Examples) {
				t.Fatalf("read in another order, digest %d is %+v, was %+v", i, again[i], got[i])
			}
		}
	}

	raw, err := JSON(rest)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Others []struct {
			Scenario string `json:"scenario"`
			Count    int    `json:"count"`
		} `json:"other_groups"`
	}
	if err := json.Unmarshal(raw, &body); err != nil || len(body.Others) != 5 || body.Others[0].Scenario != "s2" {
		t.Errorf("json body of the rest %s (%v)", raw, err)
	}
	if raw, err := Slack(rest); err != nil || !strings.Contains(string(raw), "for 5 other scenarios") || !strings.Contains(string(raw), "5 ip warn for `s2`") {
		t.Errorf("slack body of the rest %s (%v)", raw, err)
	}
}

// The rest lists a bounded number of its groups, however many it covers.
func TestDigestOfTheRestListsBoundedGroups(t *testing.T) {
	now := time.Now().UTC()
	b := NewBuilder(now.Truncate(time.Minute), now.Truncate(time.Minute).Add(time.Minute), 5)
	for i := range 500 {
		b.Add("slack", &event.Ban{BanID: fmt.Sprint("w", i), TS: now, Action: event.ActionWarn, Scope: event.ScopeUser,
			Subject: "u", Reason: fmt.Sprint("scenario_", i)})
	}
	got := b.Digests()
	rest := got[len(got)-1]
	for _, d := range got {
		if d.Others != nil {
			rest = d
		}
	}
	if len(got) != DefaultMaxDigests || len(rest.Others) != maxOthersListed || rest.OthersOmitted != 500-(DefaultMaxDigests-1)-maxOthersListed {
		t.Errorf("%d digests; the rest lists %d groups and omits %d", len(got), len(rest.Others), rest.OthersOmitted)
	}
}
