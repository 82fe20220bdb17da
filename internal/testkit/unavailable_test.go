package testkit_test

import (
	"testing"

	"github.com/ratewarden/ratewarden/internal/testkit"
)

// recorder is a testing.TB that records whether the test was skipped or
// failed instead of ending it.
type recorder struct {
	testing.TB
	skipped, failed bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Skipf(string, ...any)  { r.skipped = true }
func (r *recorder) Fatalf(string, ...any) { r.failed = true }
func (r *recorder) Logf(string, ...any)   {}
func (r *recorder) Errorf(string, ...any) { r.failed = true }
func (r *recorder) Cleanup(func())        {}

func TestUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name, ci      string
		skip, failure bool
	}{
		{name: "laptop", ci: "", skip: true},
		{name: "CI", ci: "true", failure: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CI", tc.ci)
			r := &recorder{TB: t}
			testkit.Unavailable(r, "redis at %s does not answer", "127.0.0.1:1")
			if r.skipped != tc.skip || r.failed != tc.failure {
				t.Errorf("skipped %v, failed %v; want %v, %v", r.skipped, r.failed, tc.skip, tc.failure)
			}
		})
	}
}
