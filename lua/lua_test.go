package lua

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestSource(t *testing.T) {
	for _, alg := range Algorithms {
		t.Run(alg, func(t *testing.T) {
			src := Source(alg)
			if !strings.HasPrefix(src, "-- common.lua") || !strings.Contains(src, "\n-- prelude.lua") {
				t.Fatalf("script of %s does not start with the helpers then the prelude", alg)
			}
			if !strings.Contains(src, "-- "+alg+".lua") {
				t.Errorf("script of %s lacks its header comment", alg)
			}
			if !strings.HasSuffix(strings.TrimSpace(src), "return decide(alg)") {
				t.Errorf("script of %s does not end with return decide(alg)", alg)
			}
		})
	}
	for _, name := range []string{"", "prelude", "common", "leaky_bucket", "../lua/prelude", "fixed_window.lua"} {
		if Source(name) != "" {
			t.Errorf("Source(%q) is not empty", name)
		}
	}
}

// TestCompile loads every script into the local Redis, which compiles it.
func TestCompile(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	t.Cleanup(func() { client.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, alg := range Algorithms {
		if err := client.ScriptLoad(ctx, Source(alg)).Err(); err != nil {
			t.Errorf("load %s: %v", alg, err)
		}
	}
}

// TestDetectScripts checks the detector's scripts stand alone and compile.
func TestDetectScripts(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	t.Cleanup(func() { client.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for name, src := range map[string]string{"detect_windows": DetectWindows(), "detect_claim": DetectClaim()} {
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
