package lua

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

func TestSource(t *testing.T) {
	for _, alg := range Algorithms {
		t.Run(alg, func(t *testing.T) {
			src := Source(alg)
			if src != Script(alg, Full, DebitAdmitted) {
				t.Fatalf("Source(%s) is not its full script", alg)
			}
			for v, prelude := range map[Variant]string{Full: "prelude.lua", NoHolds: "noholds.lua"} {
				src := Script(alg, v, DebitAdmitted)
				const admitted = "local DEBIT_DENIED, PROBE = false, false"
				if !strings.HasPrefix(src, admitted+"\n-- arith.lua") || !strings.Contains(src, "\n-- common.lua") || !strings.Contains(src, "\n-- "+prelude) {
					t.Errorf("%s script of %s does not start with DEBIT_DENIED and PROBE, arith.lua, common.lua then %s", v, alg, prelude)
				}
				for d, flags := range map[Debit]string{DebitDenied: "true, false", DebitNothing: "false, true"} {
					if other := Script(alg, v, d); other != "local DEBIT_DENIED, PROBE = "+flags+strings.TrimPrefix(src, admitted) {
						t.Errorf("%s script of %s with debit rule %d is not the same files after DEBIT_DENIED, PROBE = %s", v, alg, d, flags)
					}
				}
				if !strings.Contains(src, "-- "+alg+".lua") {
					t.Errorf("%s script of %s lacks its header comment", v, alg)
				}
				if !strings.HasSuffix(strings.TrimSpace(src), "return decide(alg)") {
					t.Errorf("%s script of %s does not end with return decide(alg)", v, alg)
				}
			}
			if one := Script(alg, OneLimit, DebitAdmitted); one != "" && !strings.Contains(one, "-- "+alg+"_one.lua") {
				t.Errorf("one-limit script of %s lacks its header comment", alg)
			}
		})
	}
	for _, alg := range []string{"sliding_window", "sliding_window_counter", "token_bucket"} {
		if Script(alg, OneLimit, DebitAdmitted) == "" {
			t.Errorf("%s has no one-limit script", alg)
		}
	}
	if Script("fixed_window", OneLimit, DebitDenied) != "" {
		t.Error("fixed_window has a one-limit script: its calls are counted without one")
	}
	for _, name := range []string{"", "prelude", "common", "noholds", "leaky_bucket", "../lua/prelude", "fixed_window.lua", "fixed_window_one"} {
		for _, v := range Variants {
			if Script(name, v, DebitAdmitted) != "" {
				t.Errorf("Script(%q, %s) is not empty", name, v)
			}
		}
	}
	if Script("fixed_window", "other", DebitAdmitted) != "" {
		t.Error("a script of an unknown variant")
	}
}

// TestCompile loads every script of every variant into the local Redis,
// which compiles it.
func TestCompile(t *testing.T) {
	client := redistest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, alg := range Algorithms {
		for _, v := range Variants {
			for _, debit := range Debits {
				if src := Script(alg, v, debit); src != "" {
					if err := client.ScriptLoad(ctx, src).Err(); err != nil {
						t.Errorf("load %s %s (debit rule %d): %v", alg, v, debit, err)
					}
				}
			}
		}
	}
}

// TestDetectScripts checks the scripts outside the algorithms (the
// detector's, the clock) stand alone and compile.
func TestDetectScripts(t *testing.T) {
	client := redistest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for name, src := range map[string]string{"detect_windows": DetectWindows(), "detect_claim": DetectClaim(), "detect_distinct": DetectDistinct(), "clock": Clock()} {
		if !strings.HasPrefix(src, "-- "+name+".lua") {
			t.Errorf("%s does not start with its header comment", name)
		}
		if Source(name) != "" {
			t.Errorf("Source(%q) is not empty: not an algorithm", name)
		}
		if err := client.ScriptLoad(ctx, src).Err(); err != nil {
			t.Errorf("load %s: %v", name, err)
		}
	}
}

// TestConcurrencyScript checks the concurrency script is arith.lua and
// concurrency.lua, compiles, and is not an algorithm of the rules file
// yet.
func TestConcurrencyScript(t *testing.T) {
	src := Concurrency()
	if !strings.HasPrefix(src, "local DEBIT_DENIED, PROBE = false, false\n-- arith.lua") || !strings.Contains(src, "\n-- concurrency.lua") {
		t.Error("the concurrency script is not arith.lua then concurrency.lua")
	}
	if Source("concurrency") != "" || slices.Contains(Algorithms, "concurrency") {
		t.Error("concurrency is listed among the algorithms of the rules file")
	}
	client := redistest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for name, src := range map[string]string{"concurrency": src, "give_back": GiveBack()} {
		if err := client.ScriptLoad(ctx, src).Err(); err != nil {
			t.Errorf("load %s: %v", name, err)
		}
	}
}
