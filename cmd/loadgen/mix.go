package main

import (
	"fmt"
	"strconv"
	"strings"
)

// Profile is a kind of client in the traffic mix.
type Profile int

// The traffic profiles, in the order summaries list them.
const (
	Normal     Profile = iota // many keys, realistic endpoints
	Bursty                    // a few IPs, each a run of back-to-back requests then quiet
	Scanner                   // a few IPs, each probing many distinct paths
	Bruteforce                // a few IPs posting to the login endpoint with many user ids
	numProfiles
)

var profileNames = [numProfiles]string{"normal", "bursty", "scanner", "bruteforce"}

func (p Profile) String() string { return profileNames[p] }

// Mix is the weight of each profile: the share of requests it sends is its
// weight over the sum.
type Mix [numProfiles]int

// maxWeight keeps the cumulative weights far from overflow.
const maxWeight = 1_000_000

// ParseMix reads "normal=90,bursty=8,scanner=2": a comma-separated list of
// profile=weight with non-negative integer weights, each profile at most
// once. Profiles not named weigh zero; at least one weight must be positive.
func ParseMix(s string) (Mix, error) {
	var m Mix
	var seen [numProfiles]bool
	if strings.TrimSpace(s) == "" {
		return m, fmt.Errorf("empty: want profile=weight pairs such as normal=90,bursty=10 (profiles: %s)", profileList())
	}
	for item := range strings.SplitSeq(s, ",") {
		name, weight, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			return m, fmt.Errorf("%q: want profile=weight", item)
		}
		name = strings.TrimSpace(name)
		p, ok := profileByName(name)
		if !ok {
			return m, fmt.Errorf("unknown profile %q (profiles: %s)", name, profileList())
		}
		if seen[p] {
			return m, fmt.Errorf("profile %q given twice", name)
		}
		seen[p] = true
		w, err := strconv.Atoi(strings.TrimSpace(weight))
		if err != nil || w < 0 || w > maxWeight {
			return m, fmt.Errorf("%s: weight %q is not an integer between 0 and %d", name, weight, maxWeight)
		}
		m[p] = w
	}
	if m.total() == 0 {
		return m, fmt.Errorf("%q: every weight is zero", s)
	}
	return m, nil
}

func profileByName(name string) (Profile, bool) {
	for p, n := range profileNames {
		if n == name {
			return Profile(p), true
		}
	}
	return 0, false
}

func profileList() string { return strings.Join(profileNames[:], ", ") }

func (m Mix) total() int {
	t := 0
	for _, w := range m {
		t += w
	}
	return t
}

// String formats m as ParseMix reads it, zero weights left out.
func (m Mix) String() string {
	var parts []string
	for p, w := range m {
		if w > 0 {
			parts = append(parts, profileNames[p]+"="+strconv.Itoa(w))
		}
	}
	return strings.Join(parts, ",")
}

// picker draws profiles in proportion to a Mix.
type picker struct {
	cum   [numProfiles]int // cumulative weights
	total int
	only  Profile // the profile when a single one has weight, so no draw is needed
	one   bool
}

func newPicker(m Mix) picker {
	var pk picker
	active := 0
	for p, w := range m {
		pk.total += w
		pk.cum[p] = pk.total
		if w > 0 {
			active++
			pk.only = Profile(p)
		}
	}
	pk.one = active == 1
	return pk
}

// pick maps r, uniform in [0, total), to a profile.
func (pk *picker) pick(r int) Profile {
	for p, c := range pk.cum {
		if r < c {
			return Profile(p)
		}
	}
	return numProfiles - 1
}
