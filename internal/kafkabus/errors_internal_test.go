package kafkabus

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestThrottledLog(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	now := time.Unix(0, 0)
	tl := newThrottledLog(zap.New(core), 10*time.Second)
	tl.now = func() time.Time { return now }

	for range 5 {
		tl.warn("timeout", "kafka publish failed")
	}
	tl.warn("connection_refused", "kafka publish failed") // another class is not throttled
	now = now.Add(11 * time.Second)
	tl.warn("timeout", "kafka publish failed")

	warns := logs.FilterLevelExact(zapcore.WarnLevel).All()
	if len(warns) != 3 {
		t.Fatalf("%d warn lines, want 3", len(warns))
	}
	if got := warns[2].ContextMap()["suppressed"]; got != int64(4) {
		t.Fatalf("suppressed = %v, want 4", got)
	}
	if got := logs.FilterLevelExact(zapcore.DebugLevel).Len(); got != 4 {
		t.Fatalf("%d debug lines, want 4", got)
	}
}

func TestKafkaLoggersRouteRequestTimedOutToDebug(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	log := zap.New(core)
	debug, errs := kafkaLoggers(log, newThrottledLog(log, time.Minute), nil)
	errs.Printf("kafka: %s", "[7] Request Timed Out: the request exceeded the user-specified time limit")
	errs.Printf("error writing messages to %s", "t")
	debug.Printf("writing %d messages", 3)
	if got := logs.FilterLevelExact(zapcore.WarnLevel).Len(); got != 1 {
		t.Fatalf("%d warn lines, want 1", got)
	}
	if got := logs.FilterLevelExact(zapcore.DebugLevel).Len(); got != 2 {
		t.Fatalf("%d debug lines, want 2", got)
	}
	if d, _ := kafkaLoggers(zap.NewNop(), newThrottledLog(zap.NewNop(), time.Minute), nil); d != nil {
		t.Fatal("debug logger set although debug is off")
	}
}

// TestTemporaryFetchErrors: a rebalance under way, however wrapped, is
// waited out (the group reader rejoins by itself); an error the broker
// calls final ends the consumer.
func TestTemporaryFetchErrors(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{kafka.RebalanceInProgress, true},
		{fmt.Errorf("sync group: %w", kafka.RebalanceInProgress), true},
		{kafka.UnknownMemberId, true},
		{kafka.NotCoordinatorForGroup, true},
		{kafka.GroupAuthorizationFailed, false},
		{errors.New("some failure"), false},
	} {
		if got := temporary(tc.err); got != tc.want {
			t.Errorf("temporary(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// A consumer group rebalancing while its readers join, as every start of
// the archiver (three readers, one group) meets, is no warning: the first
// notice of a streak is info, the next ones debug. A streak that goes on
// past rebalanceWarnAfter is warned, once per throttle interval; after a
// quiet spell, a new streak is info again. Other client errors stay
// warnings.
func TestRebalanceAtJoinIsNoWarning(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	log := zap.New(core)
	now := time.Unix(0, 0)
	throttled := newThrottledLog(log, 10*time.Second)
	throttled.now = func() time.Time { return now }
	rebalance := newRebalanceLog(log, throttled)
	rebalance.now = func() time.Time { return now }
	_, errs := kafkaLoggers(log, throttled, rebalance)
	levels := func() map[zapcore.Level]int {
		m := map[zapcore.Level]int{}
		for _, e := range logs.TakeAll() {
			m[e.Level]++
		}
		return m
	}

	// A join: kafka-go's notices as the readers meet the rebalance.
	errs.Printf("Failed to sync group %s: %v", "ratewarden-archiver", kafka.RebalanceInProgress)
	now = now.Add(100 * time.Millisecond)
	errs.Printf("Failed to join group %s: %v", "ratewarden-archiver", kafka.RebalanceInProgress)
	rebalance.note("fetch met a rebalance, rejoining", zap.Error(kafka.IllegalGeneration))
	if got := levels(); got[zapcore.InfoLevel] != 1 || got[zapcore.DebugLevel] != 2 || got[zapcore.WarnLevel] != 0 {
		t.Fatalf("a join's rebalance logged %v; want 1 info, 2 debug, no warning", got)
	}

	// Still rebalancing 30s later, notices every 5s: warned at 30s, and
	// the notice at 35s is throttled.
	for range 7 {
		now = now.Add(5 * time.Second)
		errs.Printf("Failed to join group %s: %v", "g", kafka.RebalanceInProgress)
	}
	if got := levels(); got[zapcore.WarnLevel] != 1 || got[zapcore.InfoLevel] != 0 {
		t.Fatalf("a rebalance going on for 35s logged %v; want 1 warning (throttled), no info", got)
	}

	// Quiet for longer than rebalanceWarnAfter: the next join is normal.
	now = now.Add(rebalanceWarnAfter)
	errs.Printf("Failed to sync group %s: %v", "g", kafka.UnknownMemberId)
	if got := levels(); got[zapcore.InfoLevel] != 1 || got[zapcore.WarnLevel] != 0 {
		t.Fatalf("a rebalance after a quiet spell logged %v; want 1 info", got)
	}

	// Any other client error is a warning.
	errs.Printf("Failed to join group %s: %v", "g", kafka.GroupAuthorizationFailed)
	if got := levels(); got[zapcore.WarnLevel] != 1 {
		t.Fatalf("an authorization failure logged %v; want a warning", got)
	}
}
