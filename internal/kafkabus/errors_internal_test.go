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
	debug, errs := kafkaLoggers(log, newThrottledLog(log, time.Minute))
	errs.Printf("kafka: %s", "[7] Request Timed Out: the request exceeded the user-specified time limit")
	errs.Printf("error writing messages to %s", "t")
	debug.Printf("writing %d messages", 3)
	if got := logs.FilterLevelExact(zapcore.WarnLevel).Len(); got != 1 {
		t.Fatalf("%d warn lines, want 1", got)
	}
	if got := logs.FilterLevelExact(zapcore.DebugLevel).Len(); got != 2 {
		t.Fatalf("%d debug lines, want 2", got)
	}
	if d, _ := kafkaLoggers(zap.NewNop(), newThrottledLog(zap.NewNop(), time.Minute)); d != nil {
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
