package e2e

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/redisfleet"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// terminate sends SIGTERM, waits for the exit and returns the exit code (-1
// when a signal ended the process, including stop's SIGKILL after 10 s).
func (p *proc) terminate(t *testing.T) int {
	t.Helper()
	start := time.Now()
	p.stop(syscall.SIGTERM)
	code := p.cmd.ProcessState.ExitCode()
	t.Logf("%s exited with code %d %v after SIGTERM", p.name, code, time.Since(start).Round(time.Millisecond))
	if code != 0 {
		t.Errorf("%s exited with code %d after SIGTERM, want 0:\n%s", p.name, code, p.out)
	}
	return code
}

// SIGTERM under load: the limiter exits 0 and every check answered before it
// stopped has its event on the topic.
func TestLimiterShutdownFlushesEvents(t *testing.T) {
	e := newEnv(t)
	limiter := e.start("limiter", "EVENT_QUEUE_SIZE", "200000", "SHUTDOWN_TIMEOUT", "5s")
	load := startLoad(t, limiter.addr, 16, 0, nil)
	testkit.WaitFor(t, 10*time.Second, "2000 answered checks", func() bool { return load.answered.Load() >= 2000 })
	limiter.terminate(t)
	load.stop()
	answered := load.answered.Load()
	n := kafkatest.CountMessages(t, e.broker.Brokers(), decisionsTopic)
	t.Logf("%d checks answered before the limiter stopped, %d events on the topic", answered, n)
	if n < answered {
		t.Fatalf("%d events on the topic for %d answered checks: %d lost at shutdown", n, answered, answered-n)
	}
}

// offenders returns events of heavy IPs with perHeavy violations each (a
// ban at 100) and light IPs with perLight each (below the warning at 20),
// interleaved, on one endpoint (no scan).
func offenders(heavy, perHeavy, light, perLight int) (msgs [][]byte, heavyIPs []string) {
	now := time.Now().UTC()
	add := func(ip string) {
		ev := event.Decision{EventID: uuid.NewString(), TS: now.Add(time.Duration(len(msgs)) * time.Microsecond), Instance: "e2e",
			IP: ip, Endpoint: "/api/x", Method: "GET", RuleID: "api", Algorithm: "token_bucket", Limit: 10,
			Reason: event.ReasonRateLimited, RetryAfterMS: 100, Mode: "redis"}
		msgs = append(msgs, ev.AppendJSON(nil))
	}
	for h := range heavy {
		heavyIPs = append(heavyIPs, fmt.Sprintf("198.18.%d.%d", h/250, h%250+1))
	}
	for round := range max(perHeavy, perLight) {
		for h := range heavy {
			if round < perHeavy {
				add(heavyIPs[h])
			}
		}
		for l := range light {
			if round < perLight {
				add(fmt.Sprintf("198.19.%d.%d", l/250, l%250+1))
			}
		}
	}
	return msgs, heavyIPs
}

// SIGTERM while the detector works through a backlog: exit 0, and a restart
// finishes the backlog with exactly one ban per offender over the threshold.
func TestDetectorShutdownMidBacklog(t *testing.T) {
	e := newEnv(t)
	const heavy = 100
	msgs, heavyIPs := offenders(heavy, 150, 100, 10)
	produce(t, e, decisionsTopic, msgs...)

	first := e.start("detector", "DETECTOR_BATCH_SIZE", "100")
	testkit.WaitFor(t, 30*time.Second, "the detector to start consuming", func() bool {
		return first.metric(t, "rate_limit_detector_events_total", `source="decisions"`) > 0
	})
	consumed := first.metric(t, "rate_limit_detector_events_total", `source="decisions"`)
	first.terminate(t)
	t.Logf("SIGTERM after about %v of %d events", consumed, len(msgs))

	second := e.start("detector", "DETECTOR_BATCH_SIZE", "100")
	// The backlog is done when the group has committed the end of the
	// topic. The lag gauge cannot tell: it counts what kafka-go has fetched
	// into its buffer (up to 10 000 messages ahead), not what the detector
	// has handled.
	waitDrained(t, e, e.vars["DETECTOR_GROUP_ID"], decisionsTopic, 90*time.Second)
	second.terminate(t)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	active, err := redisfleet.NewBlacklist(redistest.Client(t), e.vars["REDIS_KEY_PREFIX"]).Active(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(active) != heavy {
		t.Errorf("%d bans in Redis after the backlog, want %d", len(active), heavy)
	}

	n := kafkatest.CountMessages(t, e.broker.Brokers(), bansTopic)
	var banned []string
	for _, m := range kafkatest.ReadMessages(t, e.broker.Brokers(), bansTopic, int(n), 15*time.Second) {
		b, err := event.DecodeBan(m.Value)
		if err != nil {
			t.Fatalf("ban message %s: %v", m.Value, err)
		}
		switch {
		case !slices.Contains(heavyIPs, b.Subject):
			t.Errorf("%s %s of %s, who stayed under every threshold", b.Action, b.Reason, b.Subject)
		case b.Action == event.ActionBan:
			banned = append(banned, b.Subject)
		}
	}
	slices.Sort(banned)
	slices.Sort(heavyIPs)
	if !slices.Equal(banned, heavyIPs) {
		t.Fatalf("%d ban messages for %d distinct subjects, want exactly one for each of the %d offenders", len(banned), len(slices.Compact(slices.Clone(banned))), heavy)
	}
}

// SIGTERM while the archiver works through a backlog: exit 0, and a restart
// archives exactly N rows.
func TestArchiverShutdownMidBacklog(t *testing.T) {
	e, db := archiverEnv(t)
	const n = 20000
	produce(t, e, decisionsTopic, decisions(n, 1)...)
	first := e.start("archiver", "ARCHIVER_BATCH_SIZE", "100")
	testkit.WaitFor(t, 60*time.Second, "some rows", func() bool { return count(t, db, violations) >= 1000 })
	first.terminate(t)
	stoppedAt := count(t, db, violations)
	t.Logf("SIGTERM with %d of %d rows archived", stoppedAt, n)
	e.start("archiver", "ARCHIVER_BATCH_SIZE", "100")
	testkit.WaitFor(t, 120*time.Second, fmt.Sprintf("%d rows", n), func() bool { return count(t, db, violations) >= n })
	if got, distinct := count(t, db, violations), count(t, db, "SELECT count(DISTINCT event_id) FROM rate_limit_violations"); got != n || distinct != n {
		t.Fatalf("%d rows (%d distinct) after a SIGTERM and a restart, want exactly %d", got, distinct, n)
	}
}
