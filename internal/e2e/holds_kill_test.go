package e2e

import (
	"syscall"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testkit"
)

// killHoldRules: two exports in flight per address, a hold nobody
// releases lapsing after 2 s.
const killHoldRules = `
rules:
  - id: exports
    match: {endpoints: ["/exports/**"]}
    key: [ip]
    algorithm: concurrency
    limits: [{concurrent: 2, hold: 2s}]
`

// A limiter killed (SIGKILL) with requests it admitted in flight leaves
// their holds in Redis, where nobody will release them: another limiter
// refuses the key while they are held, admits again once they lapse (never
// before the rule's hold lifetime has passed since they were taken), and
// counts them lapsed: before, the key expired with its holds and a
// crashed limiter's holds were never counted. Nothing stays stuck past
// the lifetime.
func TestHoldsOfAKilledLimiterLapse(t *testing.T) {
	t.Parallel() // it mostly waits
	e := newEnvWith(t, killHoldRules)
	// Generous timeouts: a loaded machine's slow round trip must not send
	// a limiter to its failure policy, which this test does not play.
	first := e.start("limiter", "REDIS_TIMEOUT", "2s")
	second := e.start("limiter", "REDIS_TIMEOUT", "2s")
	const ip = "198.51.100.40"
	before := time.Now()
	for i := range 2 {
		if d := check(t, first, ip, "/exports/1"); !d.Allowed {
			t.Fatalf("check %d on the first limiter: %+v, want admitted", i+1, d)
		}
	}
	first.stop(syscall.SIGKILL)
	if d := check(t, second, ip, "/exports/2"); d.Allowed || d.Reason != "rate_limited" {
		t.Fatalf("a third request while the killed limiter's two are held: %+v, want refused", d)
	}
	testkit.WaitFor(t, 30*time.Second, "the killed limiter's holds to lapse", func() bool {
		return check(t, second, ip, "/exports/3").Allowed
	})
	// A lower bound, which a slow machine only makes easier to meet: the
	// holds were taken after before, and lapse 2 s after they were taken.
	if waited := time.Since(before); waited < 2*time.Second {
		t.Errorf("admitted %v after the holds were taken: before their 2 s lifetime", waited)
	}
	// Counted by the calls that find them lapsed (the key outlives its
	// latest hold by a lifetime for that). The polls' own admitted holds
	// may lapse too, hence at least.
	testkit.WaitFor(t, 30*time.Second, "the killed limiter's 2 holds to be counted lapsed", func() bool {
		check(t, second, ip, "/exports/4")
		return second.metric(t, "rate_limit_holds_lapsed_total", `rule="exports"`) >= 2
	})
}
