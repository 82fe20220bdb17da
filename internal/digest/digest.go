// Package digest turns the messages of the bans topic into the digests
// the notifier sends: the bans, unbans and warnings one receiver wants,
// grouped by action, scope and scenario (the ban's reason), with their
// count and a few examples. A digest's content and idempotency key are a
// function of the bans it covers, never of the order or the time they were
// read in, so a digest built again after a restart is the same digest.
//
// The package is pure: no I/O, no clock.
package digest

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"time"

	"github.com/ratewarden/ratewarden/internal/event"
)

// SourceManual is the source of the bans an operator issues through the
// admin API; the detector's are "detector".
const SourceManual = "admin"

// Selector says which messages of the bans topic a receiver wants. An
// empty list wants every value.
type Selector struct {
	// Actions are event.ActionBan, ActionUnban, ActionWarn.
	Actions []string
	// Scopes are event.ScopeIP, ScopeUser.
	Scopes []string
	// Scenarios are ban reasons: a detection scenario
	// ("credential_stuffing", "violations_5m", ...) or "manual".
	Scenarios []string
	// SkipManual leaves out the bans and unbans an operator issued.
	SkipManual bool
	// SkipDryRun leaves out the bans of scenarios in dry run.
	SkipDryRun bool
}

// Wants reports whether s selects b.
func (s *Selector) Wants(b *event.Ban) bool {
	switch {
	case s.SkipManual && b.Source == SourceManual, s.SkipDryRun && b.DryRun:
		return false
	}
	return wants(s.Actions, b.Action) && wants(s.Scopes, b.Scope) && wants(s.Scenarios, b.Reason)
}

func wants(list []string, v string) bool { return len(list) == 0 || slices.Contains(list, v) }

// Group is what one digest's bans have in common.
type Group struct {
	Receiver string
	Action   string
	Scope    string
	Scenario string
}

// Digest is what one receiver is told of one group's bans in one window.
type Digest struct {
	Group
	// Key is the idempotency key: a hash of the group and of the ids of
	// the bans covered, the same whenever the same bans are digested.
	Key string
	// WindowStart and WindowEnd bound the window (of the messages'
	// timestamps) the digest closes.
	WindowStart, WindowEnd time.Time
	// Count is how many distinct bans (by ban id) the digest covers;
	// DryRun how many of them were decided in dry run (not enforced).
	Count, DryRun int
	// FirstTS and LastTS are the earliest and the latest ban time.
	FirstTS, LastTS time.Time
	// Examples are at most the builder's bound of the bans, chosen by
	// their ids' hashes (not by arrival), sorted by subject.
	Examples []event.Ban
	// Others is set on a receiver's digest of the rest (see
	// Builder.Digests): the groups it covers, the largest first, at most
	// maxOthersListed of them; OthersOmitted counts the groups not listed.
	Others        []GroupCount
	OthersOmitted int
}

// Builder accumulates the bans of one window for every receiver. Its
// memory is bounded by the bans added: per distinct ban a 16-byte hash,
// and per group at most maxExamples bans.
type Builder struct {
	maxExamples, maxDigests int
	windowStart, windowEnd  time.Time
	groups                  map[Group]*group
}

type group struct {
	ids      map[idHash]struct{}
	dryRun   int
	first    time.Time
	last     time.Time
	examples []example // sorted by hash, at most maxExamples
}

type idHash [16]byte

type example struct {
	hash idHash
	ban  event.Ban
}

// DefaultMaxDigests is how many digests a receiver gets of one window at
// most unless LimitDigests says otherwise.
const DefaultMaxDigests = 10

// NewBuilder returns a builder of the digests of the window [start, end)
// with at most maxExamples examples each (at least 1), and at most
// DefaultMaxDigests digests per receiver.
func NewBuilder(start, end time.Time, maxExamples int) *Builder {
	return &Builder{maxExamples: max(maxExamples, 1), maxDigests: DefaultMaxDigests,
		windowStart: start, windowEnd: end, groups: map[Group]*group{}}
}

// LimitDigests bounds the digests each receiver gets of the window to n
// (at least 1): see Digests.
func (bd *Builder) LimitDigests(n int) { bd.maxDigests = max(n, 1) }

// Add counts b in receiver's digest of its group; a ban id already added
// to that digest counts once.
func (bd *Builder) Add(receiver string, b *event.Ban) {
	k := Group{Receiver: receiver, Action: b.Action, Scope: b.Scope, Scenario: b.Reason}
	g := bd.groups[k]
	if g == nil {
		g = &group{ids: map[idHash]struct{}{}}
		bd.groups[k] = g
	}
	h := hashID(b.BanID)
	if _, seen := g.ids[h]; seen {
		return
	}
	g.ids[h] = struct{}{}
	if b.DryRun {
		g.dryRun++
	}
	if g.first.IsZero() || b.TS.Before(g.first) {
		g.first = b.TS
	}
	if b.TS.After(g.last) {
		g.last = b.TS
	}
	g.addExample(h, b, bd.maxExamples)
}

// addExample keeps b when its hash is among the smallest max seen: the
// examples are the same whatever order the bans came in.
func (g *group) addExample(h idHash, b *event.Ban, limit int) {
	i, _ := slices.BinarySearchFunc(g.examples, h, func(e example, h idHash) int { return bytes.Compare(e.hash[:], h[:]) })
	if i >= limit {
		return
	}
	g.examples = slices.Insert(g.examples, i, example{hash: h, ban: Trim(*b)})
	if len(g.examples) > limit {
		g.examples = g.examples[:limit]
	}
}

// Digests returns the window's digests, ordered by receiver, action, scope
// and scenario. A receiver with more groups than the builder's bound gets
// a digest of each of its largest groups (by count, then by action, scope
// and scenario: a function of the bans) and one digest of the rest, so
// that what a window costs a receiver does not grow with the variety of
// the messages (anyone who may write to the topic chooses their reasons).
func (bd *Builder) Digests() []Digest {
	byReceiver := map[string][]Digest{}
	for k, g := range bd.groups {
		d := Digest{Group: k, Key: key(k, g.ids), WindowStart: bd.windowStart, WindowEnd: bd.windowEnd,
			Count: len(g.ids), DryRun: g.dryRun, FirstTS: g.first, LastTS: g.last}
		for _, e := range g.examples {
			d.Examples = append(d.Examples, e.ban)
		}
		sortExamples(d.Examples)
		byReceiver[k.Receiver] = append(byReceiver[k.Receiver], d)
	}
	out := make([]Digest, 0, len(bd.groups))
	for _, ds := range byReceiver {
		out = append(out, bd.bound(ds)...)
	}
	slices.SortFunc(out, func(a, b Digest) int {
		return cmp.Or(cmp.Compare(a.Receiver, b.Receiver), cmp.Compare(a.Action, b.Action),
			cmp.Compare(a.Scope, b.Scope), cmp.Compare(a.Scenario, b.Scenario))
	})
	return out
}

func sortExamples(ex []event.Ban) {
	slices.SortFunc(ex, func(a, b event.Ban) int {
		return cmp.Or(cmp.Compare(a.Subject, b.Subject), cmp.Compare(a.BanID, b.BanID))
	})
}

// key hashes the group and the sorted hashes of its ban ids.
func key(k Group, ids map[idHash]struct{}) string {
	sorted := make([]idHash, 0, len(ids))
	for h := range ids {
		sorted = append(sorted, h)
	}
	slices.SortFunc(sorted, func(a, b idHash) int { return bytes.Compare(a[:], b[:]) })
	h := sha256.New()
	for _, s := range []string{k.Receiver, k.Action, k.Scope, k.Scenario} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	for _, id := range sorted {
		h.Write(id[:])
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

func hashID(id string) idHash {
	sum := sha256.Sum256([]byte(id))
	return idHash(sum[:16])
}

// Bounds of what an example keeps of a ban: a message of the bans topic
// may have been written by anyone, and a digest is read by people.
const (
	maxText    = 200
	maxSamples = 5
)

// Trim returns b with its free texts and evidence lists bounded, so that a
// ban held costs a few kilobytes at most whatever its message held. A ban
// id longer than the bound is replaced by its hash, which keeps it
// distinct (the digests count ban ids).
func Trim(b event.Ban) event.Ban {
	if len(b.BanID) > maxText {
		sum := sha256.Sum256([]byte(b.BanID))
		b.BanID = "sha256:" + hex.EncodeToString(sum[:])
	}
	b.Subject, b.Reason, b.Source, b.Note = clip(b.Subject), clip(b.Reason), clip(b.Source), clip(b.Note)
	ev := &b.Evidence
	ev.SampleEndpoints, ev.SampleUsers = clipList(ev.SampleEndpoints), clipList(ev.SampleUsers)
	ev.SampleSources, ev.SparedSources = clipList(ev.SampleSources), clipList(ev.SparedSources)
	return b
}

func clip(s string) string {
	if len(s) <= maxText {
		return s
	}
	// Cut at a rune boundary.
	i := maxText
	for i > 0 && s[i]&0xC0 == 0x80 {
		i--
	}
	return s[:i] + "…"
}

func clipList(l []string) []string {
	if len(l) == 0 {
		return nil
	}
	out := make([]string, 0, min(len(l), maxSamples))
	for _, s := range l[:min(len(l), maxSamples)] {
		out = append(out, clip(s))
	}
	return out
}
