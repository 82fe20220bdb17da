package abusetest

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/abuse"
)

// DistinctStep adds one member to the scenario's set under Spec (the spec in
// force: a reload changes it between steps) and expects Want.
type DistinctStep struct {
	Spec                 abuse.DistinctSpec
	Member, Group, Event string
	MS                   int64 // event time: At(MS)
	Count                int64
	Introduced, Crossed  bool
	Members              []string // nil when none is answered
}

// DistinctScenario is a sequence of adds to one fresh set.
type DistinctScenario struct {
	Name  string
	Steps []DistinctStep
}

// DistinctSpecOf is the spec the detector gives a set with this threshold:
// a one-minute window, a cap of threshold+1, one sample, every member on
// crossing (an account attack's).
func DistinctSpecOf(threshold int64) abuse.DistinctSpec {
	return abuse.DistinctSpec{Window: time.Minute, Grace: time.Second, Cap: threshold + 1, Threshold: threshold,
		Samples: 1, AllOnCross: true}
}

// DistinctScenarios returns the Distinct scenarios: how a set crosses when
// a reload changes its threshold (and its cap with it).
func DistinctScenarios() []DistinctScenario {
	t10, t5, t3, t2 := DistinctSpecOf(10), DistinctSpecOf(5), DistinctSpecOf(3), DistinctSpecOf(2)
	step := func(spec abuse.DistinctSpec, member, group string, ms, count int64, introduced, crossed bool, members ...string) DistinctStep {
		return DistinctStep{Spec: spec, Member: member, Group: group, Event: fmt.Sprint("e-", member), MS: ms,
			Count: count, Introduced: introduced, Crossed: crossed, Members: members}
	}
	seenAgain := func(st DistinctStep) DistinctStep { st.Event += "-again"; return st }
	var under10 []DistinctStep
	for i := range 8 {
		m := fmt.Sprint("m", i)
		under10 = append(under10, step(t10, m, "", int64(i), int64(i+1), true, false))
	}
	return []DistinctScenario{
		{Name: "a threshold lowered under a count that never crossed crosses at the next member, pushing none out",
			Steps: append(under10,
				step(t3, "m8", "", 8, 9, true, true, "m8", "m7", "m6", "m5", "m4", "m3", "m2", "m1", "m0"),
				step(t3, "m9", "", 9, 9, true, false, "m9"),
				step(t3, "m8", "", 8, 9, true, true, "m9", "m8", "m7", "m6", "m5", "m4", "m3", "m2", "m1"), // redelivery
			)},
		{Name: "a threshold lowered after a crossing of the old one does not cross again",
			Steps: []DistinctStep{
				step(t5, "a", "", 0, 1, true, false), step(t5, "b", "", 1, 2, true, false), step(t5, "c", "", 2, 3, true, false),
				step(t5, "d", "", 3, 4, true, false), step(t5, "e", "", 4, 5, true, false),
				step(t5, "f", "", 5, 6, true, true, "f", "e", "d", "c", "b", "a"),
				step(t2, "g", "", 6, 6, true, false, "g"),
			}},
		{Name: "a threshold raised over the count, then lowered again, crosses again",
			Steps: []DistinctStep{
				step(t2, "a", "", 0, 1, true, false), step(t2, "b", "", 1, 2, true, false),
				step(t2, "c", "", 2, 3, true, true, "c", "b", "a"),
				step(t10, "d", "", 3, 4, true, false),
				seenAgain(step(t2, "d", "", 4, 4, false, false, "d")), // no introduction, no crossing
				step(t2, "e", "", 5, 5, true, true, "e", "d", "c", "b", "a"),
			}},
		{Name: "a set back under its threshold forgets its crossing",
			Steps: []DistinctStep{
				step(t2, "a", "", 0, 1, true, false), step(t2, "b", "", 1, 2, true, false),
				step(t2, "c", "", 2000, 3, true, true, "c", "b", "a"),
				step(t2, "d", "", 61_500, 2, true, false), // a and b out of the window
				step(t2, "e", "", 61_600, 3, true, true, "e", "d", "c"),
			}},
		{Name: "grouped: a threshold lowered under the groups counted crosses, answering every member",
			Steps: []DistinctStep{
				step(t10, "a1", "A", 0, 1, true, false), step(t10, "a2", "A", 1, 1, true, false),
				step(t10, "b1", "B", 2, 2, true, false), step(t10, "c1", "C", 3, 3, true, false),
				step(t2, "d1", "D", 4, 4, true, true, "d1", "c1", "b1", "a2", "a1"),
				step(t2, "e1", "E", 5, 4, true, false, "e1"),
			}},
	}
}

// RunDistinct runs every Distinct scenario on the Distinct newDistinct
// returns (fresh for each scenario).
func RunDistinct(t *testing.T, newDistinct func(t *testing.T) abuse.Distinct) {
	for _, sc := range DistinctScenarios() {
		t.Run(sc.Name, func(t *testing.T) {
			d := newDistinct(t)
			set := abuse.DistinctSet{Offender: abuse.Offender{Scope: "user", Subject: "u-42"}, Name: "account_attack"}
			for i, st := range sc.Steps {
				got, err := d.Add(context.Background(), []abuse.DistinctAdd{{Set: set, Spec: st.Spec, Member: st.Member,
					Group: st.Group, EventID: st.Event, TS: At(st.MS)}})
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				c := got[0]
				if c.Count != st.Count || c.Introduced != st.Introduced || c.Crossed != st.Crossed || !reflect.DeepEqual(c.Members, st.Members) {
					t.Errorf("step %d (%s, threshold %d): count %d introduced %v crossed %v members %q, want %d %v %v %q", i,
						st.Member, st.Spec.Threshold, c.Count, c.Introduced, c.Crossed, c.Members, st.Count, st.Introduced, st.Crossed, st.Members)
				}
			}
		})
	}
}
