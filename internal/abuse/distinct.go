package abuse

import (
	"context"
	"time"
)

// DistinctSet names one set of distinct members: an offender's, for one
// detection scenario (Name), such as the user ids a source failed on.
type DistinctSet struct {
	Offender Offender
	Name     string
}

// DistinctSpec says how a set is kept.
type DistinctSpec struct {
	// Window: a member counts while its latest sighting is within Window
	// of the newest sighting of the set.
	Window time.Duration
	// Grace is how late a sighting may arrive (the caller drops later
	// ones); with Window it sets how long an idle set is kept.
	Grace time.Duration
	// Cap bounds the members kept: when a new member would make Cap+1, the
	// least recently seen (by time, then member in byte order) goes. The
	// set then holds the Cap most recently seen members, so Count is the
	// distinct count in the window up to Cap: Threshold+1 is enough to
	// decide.
	Cap int64
	// Threshold: the set is over it when Count > Threshold.
	Threshold int64
	// Samples is how many members (the most recently seen) an add over the
	// threshold returns as evidence.
	Samples int
	// AllOnCross: an add that crosses the threshold returns every member
	// (up to Cap), not only Samples of them.
	AllOnCross bool
}

// DistinctAdd is one sighting of Member (not empty) in Set, made by the
// event EventID at TS.
type DistinctAdd struct {
	Set     DistinctSet
	Spec    DistinctSpec
	Member  string
	EventID string
	TS      time.Time
	// Group, when not empty, is the member's group (such as a source's
	// network): the set then counts groups, not members. Count is the
	// groups sighted within the window (a group's latest sighting is its
	// members' latest, kept up to Cap, the least recently sighted going
	// first), and the crossing is that count's; members are kept (up to
	// Cap) and answered as in a set without groups. The adds of one set
	// all have a group or none.
	Group string
	// Trust makes the add no sighting: it records that Member is trusted in
	// Set at TS (it succeeded, as an account's owner does) and answers the
	// zero DistinctCount, changing no count. Trust moves forward in time
	// only; up to Cap trusted members are kept (the least recently trusted
	// going first). A member trusted within Window of the set's newest
	// sighting is answered apart (see DistinctCount.Spared).
	Trust bool
}

// DistinctCount is a set right after an add.
type DistinctCount struct {
	// Newest is the newest sighting time of the set.
	Newest time.Time
	// Count is the members kept, all seen within [Newest-Window, Newest].
	Count int64
	// Introduced: this event brought Member into the set, now (it was not
	// kept) or when first delivered (it is kept, added by EventID). A
	// redelivered event answers as it did the first time, as long as its
	// member is still kept; a member seen again by another event is not
	// introduced. A sighting older than the window introduces nothing.
	Introduced bool
	// Crossed: Introduced, Count is over Threshold, and the set had not
	// crossed since it was last found at Threshold or less (by this add,
	// before its sighting, or an earlier one): the introduction took Count
	// from Threshold or less to more, or found the set over a Threshold
	// lowered (by a reload) under a count that had not crossed it. A
	// redelivery of that event answers the same.
	Crossed bool
	// First and Last bound the members' latest sightings when Count >
	// Threshold (zero times otherwise).
	First, Last time.Time
	// Members, when Count > Threshold: every member kept when Crossed and
	// Spec.AllOnCross, else the Spec.Samples most recently seen; newest
	// first (ties by member in reverse byte order), without the trusted
	// ones, which are in Spared (in the same order). Nil otherwise.
	Members, Spared []string
	// Trusted, when Count > Threshold: Member is trusted (a Trust add of
	// it at a time within Window of Newest).
	Trusted bool
}

// Distinct keeps sets of distinct members over sliding windows of event
// time. Adding is idempotent: a member only moves forward in time, so a
// redelivered event changes no count.
type Distinct interface {
	Add(ctx context.Context, adds []DistinctAdd) ([]DistinctCount, error)
}
