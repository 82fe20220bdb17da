// Package lua embeds the Redis scripts of every rate-limiting algorithm.
// Each algorithm has a script of each Variant it can run (Script says
// which, and Debit which calls it writes): the full one, for any call,
// is arith.lua and common.lua (helpers), prelude.lua (argument parsing, penalty and
// escalation holds, choice of the binding limit) and the body of the
// algorithm; the lean ones do only what a call without holds needs (see
// Variant; the one-limit scripts share arith.lua); the lease one decides a
// call of a leased rule and lends it units (lease.lua). See the header comment of each file for KEYS, ARGV and the
// reply. Every variant of an algorithm keeps the same state in the same
// keys and fields, so a key may be decided by one variant and then by
// another. GiveBack undoes a call of any of them (give_back.lua after
// arith.lua). Concurrency limits have a script of their own, outside
// Algorithms (Concurrency). The detector's scripts stand alone (no prelude): DetectWindows
// DetectDistinct and DetectClaim.
package lua

import (
	"embed"
	"fmt"
	"slices"
)

//go:embed *.lua
var files embed.FS

// Algorithms lists the names of the algorithms that have a script, as
// written in the rules file.
var Algorithms = []string{"fixed_window", "sliding_window", "sliding_window_counter", "token_bucket"}

// Variant names a form of an algorithm's script.
type Variant string

const (
	// Full decides any call: penalty, escalations, any number of limits.
	// KEYS state, hold, hits; ARGV as prelude.lua's header has it.
	Full Variant = "full"
	// NoHolds decides a call without penalty or escalations, with any
	// number of limits: noholds.lua instead of prelude.lua. KEYS state;
	// ARGV now, cost, the limits.
	NoHolds Variant = "noholds"
	// OneLimit decides a call without penalty or escalations and with one
	// limit, in a script of its own (<algorithm>_one.lua). KEYS and ARGV
	// as NoHolds. The fixed window has none: Redis decides such a call
	// with INCRBY and PEXPIRE, no script (see package redisstore).
	OneLimit Variant = "one"
	// Lease decides a call of a leased rule (decide.Call.Leased): lease.lua
	// instead of prelude.lua, for the fixed window, the sliding window
	// counter and the token bucket. KEYS state; ARGV as lease.lua's header
	// has it.
	Lease Variant = "lease"
	// Reserve takes (DebitAdmitted) and settles (DebitDenied) the
	// reservations of a rule spent by reports (decide.Call.Reserve):
	// reserve.lua instead of prelude.lua, for the fixed window and the
	// token bucket. KEYS state, reservation record; ARGV as reserve.lua's
	// header has it.
	Reserve Variant = "reserve"
)

// Variants lists the variants, fullest first.
var Variants = []Variant{Full, NoHolds, OneLimit, Lease, Reserve}

// Source returns the full script of the algorithm, or "" when there is no
// script of that name.
func Source(alg string) string { return Script(alg, Full, DebitAdmitted) }

// Debit says which calls a script writes the cost of.
type Debit uint8

const (
	// DebitAdmitted: admitted calls only.
	DebitAdmitted Debit = iota
	// DebitDenied: every call, denied ones too (decide.Call.DebitDenied).
	DebitDenied
	// DebitNothing: no call; the script answers whether the cost would
	// fit (decide.Call.Probe).
	DebitNothing
)

// Debits lists the debit rules, each with scripts of its own.
var Debits = []Debit{DebitAdmitted, DebitDenied, DebitNothing}

// Script returns the algorithm's script of variant v, or "" when there is
// none. The debit rule selects which calls it writes: the same files, after
// a line that sets DEBIT_DENIED and PROBE (see arith.lua).
func Script(alg string, v Variant, d Debit) string {
	if !slices.Contains(Algorithms, alg) {
		return ""
	}
	flag := fmt.Sprintf("local DEBIT_DENIED, PROBE = %t, %t", d == DebitDenied, d == DebitNothing)
	switch v {
	case Full:
		return join(flag, "arith.lua", "common.lua", "prelude.lua", alg+".lua")
	case NoHolds:
		return join(flag, "arith.lua", "common.lua", "noholds.lua", alg+".lua")
	case OneLimit:
		if alg == "fixed_window" {
			return ""
		}
		return join(flag, "arith.lua", alg+"_one.lua")
	case Lease:
		if alg == "sliding_window" || d == DebitNothing {
			return ""
		}
		return join(flag, "arith.lua", "common.lua", "lease.lua", alg+".lua")
	case Reserve:
		if (alg != "fixed_window" && alg != "token_bucket") || d == DebitNothing {
			return ""
		}
		return join(flag, "arith.lua", "common.lua", "reserve.lua", alg+".lua")
	}
	return ""
}

// join returns the line first, then the files named.
func join(first string, names ...string) string {
	src := []byte(first)
	for _, name := range names {
		b, err := files.ReadFile(name)
		if err != nil {
			panic("lua: " + name + " is not embedded")
		}
		src = append(src, '\n')
		src = append(src, b...)
	}
	return string(src)
}

// GiveBack returns give_back.lua after arith.lua and common.lua: gives back what a
// rate-limit script or a counted call counted for a call whose caller was
// refused without its answer, per algorithm and layout (see its header
// comment).
func GiveBack() string {
	return join("local DEBIT_DENIED, PROBE = false, false", "arith.lua", "common.lua", "give_back.lua")
}

// Concurrency returns concurrency.lua after arith.lua: takes or releases a
// hold of a concurrency limit, at most N of a key at once (see its header
// comment). It is not in Algorithms, whose scripts share the rate
// algorithms' prelude and variants: a concurrency call is routed to this
// script alone (package redisstore).
func Concurrency() string {
	return join("local DEBIT_DENIED, PROBE = false, false", "arith.lua", "concurrency.lua")
}

// DetectWindows returns detect_windows.lua: records one sighting of an
// offender and returns its tally (see its header comment).
func DetectWindows() string { return standalone("detect_windows.lua") }

// DetectDistinct returns detect_distinct.lua: adds a member to an
// offender's set of distinct members over a window and returns the set
// (see its header comment).
func DetectDistinct() string { return standalone("detect_distinct.lua") }

// DetectClaim returns detect_claim.lua: claims and settles an offender's ban
// or warning record, escalating repeat offenders (see its header comment).
func DetectClaim() string { return standalone("detect_claim.lua") }

// Clock returns clock.lua: the server's clock in milliseconds (see its
// header comment).
func Clock() string { return standalone("clock.lua") }

func standalone(name string) string {
	src, err := files.ReadFile(name)
	if err != nil {
		panic("lua: " + name + " is not embedded")
	}
	return string(src)
}
