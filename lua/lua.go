// Package lua embeds the Redis scripts of every rate-limiting algorithm. Each
// script is the shared helpers (common.lua), the prelude (argument parsing,
// penalty and escalation holds, choice of the binding limit) and the body of
// one algorithm; see the header comments of prelude.lua and of each
// algorithm file for KEYS, ARGV and the reply. The detector's scripts stand alone (no prelude):
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

// Source returns the complete script (helpers, prelude and body) of the
// algorithm, or "" when there is no script of that name.
func Source(alg string) string {
	if !slices.Contains(Algorithms, alg) {
		return ""
	}
	return join("common.lua", "prelude.lua", alg+".lua")
}

// join returns the embedded files one after the other, each on new lines.
func join(names ...string) string {
	var src []byte
	for i, name := range names {
		b, err := files.ReadFile(name)
		if err != nil {
			panic("lua: " + name + " is not embedded")
		}
		if i > 0 {
			src = append(src, '\n')
		}
		src = append(src, b...)
	}
	return string(src)
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
