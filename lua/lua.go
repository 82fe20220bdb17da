// Package lua embeds the Redis scripts of every rate-limiting algorithm. Each
// script is the shared prelude (argument parsing, penalty and escalation
// holds, choice of the binding limit) followed by the body of one algorithm;
// see the header comments of prelude.lua and of each algorithm file for KEYS,
// ARGV and the reply.
package lua

import (
	"embed"
	"strings"
)

//go:embed *.lua
var files embed.FS

// Algorithms lists the names of the algorithms that have a script, as
// written in the rules file.
var Algorithms = []string{"fixed_window", "sliding_window", "token_bucket"}

// Source returns the complete script (prelude and body) of the algorithm,
// or "" when there is no script of that name.
func Source(alg string) string {
	body, err := files.ReadFile(alg + ".lua")
	if err != nil || alg == "prelude" || strings.ContainsAny(alg, "/.") {
		return ""
	}
	prelude, err := files.ReadFile("prelude.lua")
	if err != nil {
		panic("lua: prelude.lua is not embedded")
	}
	return string(prelude) + "\n" + string(body)
}
