// Package lua embeds the Redis scripts of every rate-limiting algorithm. Each
// script is the shared prelude (argument parsing, penalty and escalation
// holds, choice of the binding limit) followed by the body of one algorithm;
// see the header comments of prelude.lua and of each algorithm file for KEYS,
// ARGV and the reply. The detector's scripts stand alone (no prelude):
// DetectWindows and DetectClaim.
package lua

import (
	"embed"
	"slices"
)

//go:embed *.lua
var files embed.FS

// Algorithms lists the names of the algorithms that have a script, as
// written in the rules file.
var Algorithms = []string{"fixed_window", "sliding_window", "sliding_window_counter", "token_bucket"}

// Source returns the complete script (prelude and body) of the algorithm,
// or "" when there is no script of that name.
func Source(alg string) string {
	body, err := files.ReadFile(alg + ".lua")
	if err != nil || !slices.Contains(Algorithms, alg) {
		return ""
	}
	prelude, err := files.ReadFile("prelude.lua")
	if err != nil {
		panic("lua: prelude.lua is not embedded")
	}
	return string(prelude) + "\n" + string(body)
}

// DetectWindows returns detect_windows.lua: records one sighting of an
// offender and returns its tally (see its header comment).
func DetectWindows() string { return standalone("detect_windows.lua") }

// DetectClaim returns detect_claim.lua: claims and settles an offender's ban
// or warning record, escalating repeat offenders (see its header comment).
func DetectClaim() string { return standalone("detect_claim.lua") }

func standalone(name string) string {
	src, err := files.ReadFile(name)
	if err != nil {
		panic("lua: " + name + " is not embedded")
	}
	return string(src)
}
