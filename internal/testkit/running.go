package testkit

import (
	"context"
	"sync"
	"testing"
	"time"
)

// Running is a service's Run on a goroutine of its own, from Start until
// Stop or the end of the test.
type Running struct {
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// Start calls run on a goroutine of its own with a context that Stop ends;
// the run is stopped when the test ends, if it was not before.
func Start(tb testing.TB, run func(context.Context) error) *Running {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &Running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- run(ctx) }()
	tb.Cleanup(func() { r.Stop(tb) })
	return r
}

// Stop ends the run's context and requires run to return nil within 30 s,
// as a service told to stop does. A second Stop does nothing.
func (r *Running) Stop(tb testing.TB) {
	tb.Helper()
	r.once.Do(func() {
		r.cancel()
		select {
		case err := <-r.done:
			if err != nil {
				tb.Errorf("run, stopped, returned %v; want nil", err)
			}
		case <-time.After(30 * time.Second):
			tb.Errorf("run did not return within 30s of its cancellation")
		}
	})
}
