package testkit_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ratewarden/ratewarden/internal/testkit"
)

// Stop ends the run's context and waits for it; a run that returns an
// error when stopped fails the test, and a second Stop does nothing.
func TestStartAndStop(t *testing.T) {
	for _, tc := range []struct {
		name    string
		returns error
		failed  bool
	}{
		{name: "clean stop", returns: nil},
		{name: "stop with an error", returns: errors.New("boom"), failed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{TB: t}
			ended := false
			r := testkit.Start(rec, func(ctx context.Context) error {
				<-ctx.Done()
				ended = true
				return tc.returns
			})
			r.Stop(rec)
			if !ended || rec.failed != tc.failed {
				t.Fatalf("run ended %v, test failed %v; want true, %v", ended, rec.failed, tc.failed)
			}
			r.Stop(rec) // a second Stop must not block on the run again
		})
	}
}
