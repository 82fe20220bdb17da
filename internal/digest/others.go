package digest

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"slices"
)

// Mixed is the action or the scope of a digest of the rest whose groups
// differ in it (a message of the bans topic never has it: its action and
// scope are checked when it is decoded).
const Mixed = "mixed"

// maxOthersListed bounds the groups a digest of the rest lists.
const maxOthersListed = 10

// GroupCount is one group a digest of the rest covers, and its count.
type GroupCount struct {
	Action, Scope, Scenario string
	Count                   int
}

// bound returns one receiver's digests with at most bd.maxDigests of them:
// the largest groups keep theirs, and the rest are merged into one.
func (bd *Builder) bound(ds []Digest) []Digest {
	if len(ds) <= bd.maxDigests {
		return ds
	}
	slices.SortFunc(ds, func(a, b Digest) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Action, b.Action),
			cmp.Compare(a.Scope, b.Scope), cmp.Compare(a.Scenario, b.Scenario))
	})
	keep := bd.maxDigests - 1
	return append(ds[:keep:keep], bd.others(ds[keep:]))
}

// others merges rest (sorted, the largest first) into one digest: the
// sums of their counts, the examples of smallest id hashes among theirs,
// and a key that hashes theirs, so that it too is a function of the bans.
func (bd *Builder) others(rest []Digest) Digest {
	first := rest[0]
	d := Digest{Group: Group{Receiver: first.Receiver, Action: first.Action, Scope: first.Scope},
		WindowStart: bd.windowStart, WindowEnd: bd.windowEnd, FirstTS: first.FirstTS, LastTS: first.LastTS}
	var examples []example
	keys := make([]string, 0, len(rest))
	for _, g := range rest {
		if g.Action != d.Action {
			d.Action = Mixed
		}
		if g.Scope != d.Scope {
			d.Scope = Mixed
		}
		d.Count += g.Count
		d.DryRun += g.DryRun
		if g.FirstTS.Before(d.FirstTS) {
			d.FirstTS = g.FirstTS
		}
		if g.LastTS.After(d.LastTS) {
			d.LastTS = g.LastTS
		}
		for _, b := range g.Examples {
			examples = append(examples, example{hash: hashID(b.BanID), ban: b})
		}
		keys = append(keys, g.Key)
		if len(d.Others) < maxOthersListed {
			d.Others = append(d.Others, GroupCount{Action: g.Action, Scope: g.Scope, Scenario: g.Scenario, Count: g.Count})
		}
	}
	d.OthersOmitted = len(rest) - len(d.Others)
	slices.SortFunc(examples, func(a, b example) int {
		return cmp.Or(bytes.Compare(a.hash[:], b.hash[:]), cmp.Compare(a.ban.Subject, b.ban.Subject))
	})
	// A ban id published under two reasons is an example of both groups.
	examples = slices.CompactFunc(examples, func(a, b example) bool { return a.ban.BanID == b.ban.BanID })
	for _, e := range examples[:min(len(examples), bd.maxExamples)] {
		d.Examples = append(d.Examples, e.ban)
	}
	sortExamples(d.Examples)
	slices.Sort(keys)
	h := sha256.New()
	h.Write([]byte(d.Receiver + "\x00others\x00"))
	for _, k := range keys {
		h.Write([]byte(k))
	}
	d.Key = hex.EncodeToString(h.Sum(nil)[:16])
	return d
}
