package rulesync_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ratewarden/ratewarden/internal/rulesync"
)

// descriptorFile's rule x keys on domain other, key k.
const descriptorFile = fileRules + `
  - id: x
    algorithm: fixed_window
    limits: [{requests: 7, per: 1s}]
    descriptor: {domain: other, entries: [{key: k}]}
`

// A limiter that missed an announcement validates an admin change against
// what the store holds: deleting an override whose file rule clashes with
// a dynamic rule another limiter stored since is refused, and nothing is
// stored, rather than answered as done while every limiter refuses the
// version it made.
func TestAChangeOnAStaleLimiterIsValidatedAgainstTheStore(t *testing.T) {
	s := newSystem(t)
	writeFile(t, s.file, descriptorFile)
	a := s.start()
	ctx := context.Background()
	override := `{"id":"x","algorithm":"fixed_window","limits":[{"requests":8,"per":"1s"}],"descriptor":{"domain":"other","entries":[{"key":"k2"}]}}`
	clash := `{"id":"y","algorithm":"fixed_window","limits":[{"requests":9,"per":"1s"}],"descriptor":{"domain":"other","entries":[{"key":"k"}]}}`
	if _, err := a.Put(ctx, "x", []byte(override), alice); err != nil {
		t.Fatal(err)
	}
	deaf := s.start(withoutAnnouncements)
	if _, err := a.Put(ctx, "y", []byte(clash), alice); err != nil {
		t.Fatal(err)
	}
	_, err := deaf.Delete(ctx, "x", alice)
	var invalid *rulesync.InvalidError
	if !errors.As(err, &invalid) {
		t.Fatalf("deleting x on a limiter that missed y: %v, want an InvalidError (400); refused now: %+v", err, deaf.View().DynamicRefused)
	}
	if refused := deaf.View().DynamicRefused; refused != nil {
		t.Fatalf("a refused delete left a refused version behind: %+v", refused)
	}
	if got := deaf.limit("x"); got != 8 {
		t.Fatalf("x's limit on the stale limiter after the refused delete: %d, want the override's 8", got)
	}
}
