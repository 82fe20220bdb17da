package warmup

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ratewarden/ratewarden/internal/testkit"
)

var errDown = errors.New("connection refused")

func classify(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, errDown):
		return "connection"
	}
	return "other"
}

// outcome is what one Run left behind.
type outcome struct {
	done     bool
	took     time.Duration
	complete float64
	duration float64
	logs     *observer.ObservedLogs
}

func run(t *testing.T, timeout time.Duration, steps ...Step) outcome {
	t.Helper()
	core, logs := observer.New(zap.InfoLevel)
	reg := prometheus.NewRegistry()
	start := time.Now()
	done := Run(context.Background(), Config{Steps: steps, Timeout: timeout, Classify: classify, Log: zap.New(core), Registerer: reg})
	o := outcome{done: done, took: time.Since(start), logs: logs}
	o.complete = testkit.MetricSum(t, reg, "rate_limit_warmup_complete", nil)
	o.duration = testkit.MetricSum(t, reg, "rate_limit_warmup_duration_seconds", nil)
	return o
}

// failing returns a step failing its first n runs, and the count of runs.
func failing(name string, n int) (Step, *int) {
	runs := new(int)
	return Step{Name: name, Run: func(context.Context) error {
		*runs++
		if *runs <= n {
			return errDown
		}
		return nil
	}}, runs
}

func TestRun(t *testing.T) {
	t.Run("steps in order, each retried until it succeeds", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var order []string
			redis, redisRuns := failing("redis", 3)
			bans := Step{Name: "bans", Run: func(context.Context) error {
				if *redisRuns < 4 {
					t.Error("bans loaded before redis was ready")
				}
				order = append(order, "bans")
				return nil
			}}
			o := run(t, 5*time.Second, redis, bans)
			if !o.done || o.complete != 1 || *redisRuns != 4 || len(order) != 1 {
				t.Fatalf("done %v, complete %v, redis ran %d times, bans %v", o.done, o.complete, *redisRuns, order)
			}
			if o.duration != o.took.Seconds() || o.took != 300*time.Millisecond {
				t.Errorf("duration %vs, took %v: want the three pauses of 100ms", o.duration, o.took)
			}
			if o.logs.FilterMessage("warm-up done").Len() != 1 {
				t.Errorf("logs %v", o.logs.All())
			}
		})
	})

	t.Run("a step failing until the deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			redis, _ := failing("redis", 1<<30)
			bans, bansRuns := failing("bans", 0)
			o := run(t, 5*time.Second, redis, bans)
			if o.done || o.complete != 0 || *bansRuns != 0 {
				t.Fatalf("done %v, complete %v, bans ran %d times: want given up before bans", o.done, o.complete, *bansRuns)
			}
			if o.took != 5*time.Second || o.duration != 5 {
				t.Errorf("gave up after %v (gauge %vs), want at the 5s deadline", o.took, o.duration)
			}
			requireGaveUp(t, o.logs, "redis", "connection")
		})
	})

	t.Run("refused, then cut short by the deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			redis := Step{Name: "redis", Run: func(ctx context.Context) error {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(300 * time.Millisecond):
					return errDown
				}
			}}
			o := run(t, time.Second, redis)
			if o.done {
				t.Fatal("done with a Redis refusing every attempt")
			}
			requireGaveUp(t, o.logs, "redis", "connection")
		})
	})

	t.Run("a step hanging past the deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			hung := Step{Name: "redis", Run: func(ctx context.Context) error {
				<-ctx.Done()
				return ctx.Err()
			}}
			o := run(t, 2*time.Second, hung)
			if o.done || o.took != 2*time.Second {
				t.Fatalf("done %v after %v, want given up at the 2s deadline", o.done, o.took)
			}
			requireGaveUp(t, o.logs, "redis", "timeout")
		})
	})

	t.Run("stopped during the warm-up", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			core, logs := observer.New(zap.InfoLevel)
			ctx, stop := context.WithCancel(context.Background())
			redis := Step{Name: "redis", Run: func(context.Context) error { stop(); return context.Canceled }}
			if Run(ctx, Config{Steps: []Step{redis}, Timeout: time.Minute, Classify: classify, Log: zap.New(core), Registerer: prometheus.NewRegistry()}) {
				t.Fatal("a cancelled warm-up reported done")
			}
			if logs.Len() != 0 {
				t.Errorf("logs %v: stopping is no verdict on Redis", logs.All())
			}
		})
	})

	t.Run("nothing to do", func(t *testing.T) {
		o := run(t, time.Second)
		if !o.done || o.complete != 1 {
			t.Fatalf("done %v, complete %v", o.done, o.complete)
		}
	})
}

// requireGaveUp fails unless logs hold one warning naming step and class.
func requireGaveUp(t *testing.T, logs *observer.ObservedLogs, step, class string) {
	t.Helper()
	warns := logs.FilterLevelExact(zap.WarnLevel).All()
	if len(warns) != 1 {
		t.Fatalf("warnings %v, want one", warns)
	}
	fields := warns[0].ContextMap()
	if fields["step"] != step || fields["class"] != class {
		t.Errorf("warning fields %v, want step %s, class %s", fields, step, class)
	}
}
