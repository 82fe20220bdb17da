package rules

import (
	"slices"
	"testing"
)

func TestMergeOverridesByID(t *testing.T) {
	f := &File{
		Rules:  []Rule{{ID: "a", Priority: 1}, {ID: "b", Priority: 2}},
		Exempt: Exempt{Tiers: []string{"ADMIN"}},
	}
	got := Merge(f, []Rule{{ID: "b", Priority: 20}, {ID: "c", Priority: 3}})
	var ids []string
	var prios []int
	for _, r := range got.Rules {
		ids = append(ids, r.ID)
		prios = append(prios, r.Priority)
	}
	if !slices.Equal(ids, []string{"a", "b", "c"}) || !slices.Equal(prios, []int{1, 20, 3}) {
		t.Fatalf("merged rules %v %v; want a b c with b overridden (20)", ids, prios)
	}
	if len(got.Exempt.Tiers) != 1 {
		t.Fatalf("exemptions lost: %+v", got.Exempt)
	}
	if len(f.Rules) != 2 || f.Rules[1].Priority != 2 {
		t.Fatalf("Merge modified its input: %+v", f.Rules)
	}
}
