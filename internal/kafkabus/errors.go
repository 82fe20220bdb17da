package kafkabus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"
)

// ErrorClass maps an error from kafka-go to a short, bounded name fit for a
// metric label or a log key: "timeout", "connection_refused",
// "connection_lost", "network", "writer_closed", "kafka_<error_title>" or
// "other".
func ErrorClass(err error) string {
	var kerr kafka.Error
	var netErr net.Error
	switch {
	case err == nil:
		return "none"
	case errors.As(err, &kerr):
		return "kafka_" + strings.ToLower(strings.ReplaceAll(kerr.Title(), " ", "_"))
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection_refused"
	case errors.Is(err, io.ErrClosedPipe):
		return "writer_closed"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed):
		return "connection_lost"
	case errors.As(err, &netErr):
		return "network"
	default:
		return "other"
	}
}

// throttledLog logs at warn at most once per interval and error class, and
// reports how many were suppressed in between, so a dead broker produces a
// line every few seconds instead of one per batch.
type throttledLog struct {
	log      *zap.Logger
	interval time.Duration
	now      func() time.Time

	mu    sync.Mutex
	state map[string]*throttleState
}

type throttleState struct {
	last       time.Time
	suppressed int
}

func newThrottledLog(log *zap.Logger, interval time.Duration) *throttledLog {
	return &throttledLog{log: log, interval: interval, now: time.Now, state: make(map[string]*throttleState)}
}

// warn logs msg at warn level unless class was logged within the interval;
// suppressed lines go to debug.
func (t *throttledLog) warn(class, msg string, fields ...zap.Field) {
	now := t.now()
	t.mu.Lock()
	st, ok := t.state[class]
	if !ok {
		st = &throttleState{}
		t.state[class] = st
	}
	if ok && now.Sub(st.last) < t.interval {
		st.suppressed++
		t.mu.Unlock()
		t.log.Debug(msg, append(fields, zap.String("class", class))...)
		return
	}
	suppressed := st.suppressed
	st.last, st.suppressed = now, 0
	t.mu.Unlock()
	t.log.Warn(msg, append(fields, zap.String("class", class), zap.Int("suppressed", suppressed))...)
}

// rebalanceWarnAfter is how long a consumer group may keep rebalancing
// before it is warned about: kafka-go's rebalance timeout, the longest a
// normal join waits for the members to rejoin (a restarted member's old
// self holds its place until its session times out).
const rebalanceWarnAfter = 30 * time.Second

// rebalanceLog logs a reader's consumer group rebalances. Readers of one
// group that join together (the archiver's, one per topic, at every start)
// are told to rejoin once or twice before the group settles: the first
// notice of a streak goes to info, the rest to debug. A streak that lasts
// rebalanceWarnAfter (no rebalanceWarnAfter without a notice) is no
// normal join any more: warned, through the throttle.
type rebalanceLog struct {
	log  *zap.Logger
	warn *throttledLog
	now  func() time.Time

	mu          sync.Mutex
	first, last time.Time // the streak's first notice and its latest
}

func newRebalanceLog(log *zap.Logger, warn *throttledLog) *rebalanceLog {
	return &rebalanceLog{log: log, warn: warn, now: time.Now}
}

// note logs msg, a rebalance notice, as the streak it belongs to calls for.
func (r *rebalanceLog) note(msg string, fields ...zap.Field) {
	now := r.now()
	r.mu.Lock()
	starts := r.last.IsZero() || now.Sub(r.last) >= rebalanceWarnAfter
	if starts {
		r.first = now
	}
	r.last = now
	lasted := now.Sub(r.first)
	r.mu.Unlock()
	switch {
	case lasted >= rebalanceWarnAfter:
		r.warn.warn("rebalance", msg+"; the group keeps rebalancing", append(fields, zap.Duration("for", lasted))...)
	case starts:
		r.log.Info(msg, fields...)
	default:
		r.log.Debug(msg, fields...)
	}
}

// rebalancing reports whether err is a consumer group's call to rejoin: a
// rebalance under way, or a membership the reader must renew.
func rebalancing(err error) bool {
	var ke kafka.Error
	if errors.As(err, &ke) {
		switch ke {
		case kafka.RebalanceInProgress, kafka.IllegalGeneration, kafka.UnknownMemberId:
			return true
		}
	}
	return false
}

// rebalanceTitles are the kafka-go error titles of rebalancing, as its
// logs write them ("Failed to sync group g: [27] Rebalance In Progress").
var rebalanceTitles = []string{kafka.RebalanceInProgress.Title(), kafka.IllegalGeneration.Title(), kafka.UnknownMemberId.Title()}

// kafkaLoggers routes kafka-go's writer and reader logs to zap: its chatter
// at debug (left out entirely when debug is off, which spares kafka-go the
// formatting), its errors at warn through the throttle. The reader reports
// "[7] Request Timed Out" for every empty long-poll fetch: that goes to
// debug; and a group rebalancing, which every join of several readers
// meets, to rebalance (nil: a writer, which joins no group).
func kafkaLoggers(log *zap.Logger, warn *throttledLog, rebalance *rebalanceLog) (debug, errs kafka.Logger) {
	errs = kafka.LoggerFunc(func(msg string, args ...any) {
		detail := fmt.Sprintf(msg, args...)
		if strings.Contains(detail, "Request Timed Out") {
			log.Debug("kafka client", zap.String("detail", detail))
			return
		}
		if rebalance != nil && slices.ContainsFunc(rebalanceTitles, func(t string) bool { return strings.Contains(detail, t) }) {
			rebalance.note("consumer group rebalancing, rejoining", zap.String("detail", detail))
			return
		}
		warn.warn("kafka-go", "kafka client error", zap.String("detail", detail))
	})
	if !log.Core().Enabled(zap.DebugLevel) {
		return nil, errs
	}
	return kafka.LoggerFunc(func(msg string, args ...any) {
		log.Debug("kafka client", zap.String("detail", fmt.Sprintf(msg, args...)))
	}), errs
}
