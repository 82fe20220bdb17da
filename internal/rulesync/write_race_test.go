package rulesync_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"testing"

	"github.com/ratewarden/ratewarden/internal/rulesync"
)

// interposedStore lets another limiter's change land between this
// limiter's validation of a change and its write, on the first writes
// (before says how many).
type interposedStore struct {
	rulesync.Store
	before int
	other  func()
}

func (s *interposedStore) PutRule(ctx context.Context, id string, rule json.RawMessage, who rulesync.Author, base int64) (rulesync.Change, error) {
	if s.before > 0 {
		s.before--
		s.other()
	}
	return s.Store.PutRule(ctx, id, rule, who, base)
}

// withInterposed wraps the limiter's store in an interposedStore.
func withInterposed(before *int, other func()) option {
	return func(c *rulesync.Config) {
		connect := c.Connect
		c.Connect = func(ctx context.Context) (rulesync.Store, error) {
			st, err := connect(ctx)
			if err != nil {
				return nil, err
			}
			return &interposedStore{Store: st, before: *before, other: other}, nil
		}
	}
}

// Two limiters change the same rule at once: b puts it at 50 requests
// while a puts it in shadow mode, a change made from the rule a holds.
// Stored as a made it, a's change would put the rule back at 100, undoing
// b's (and a change validated against rules no longer stored could store a
// set that does not validate). A change applies only to the version it was
// made against: a makes its change again against b's, so the rule ends at
// 50 and in shadow mode. Under changes that keep landing, a limiter
// answers ErrConflict and changes nothing.
func TestConcurrentChangesOnTwoLimiters(t *testing.T) {
	s := newSystem(t)
	b := s.start()
	interpose := 1
	limit := 50
	a := s.start(withInterposed(&interpose, func() {
		body := []byte(`{"id": "login", "match": {"endpoints": ["/login"]}, "key": ["ip"],
			"algorithm": "fixed_window", "limits": [{"requests": ` + strconv.Itoa(limit) + `, "per": "1m"}]}`)
		limit++
		if _, err := b.Put(context.Background(), "login", body, alice); err != nil {
			t.Error(err)
		}
	}))
	res, err := a.SetShadow(context.Background(), "login", true, alice)
	if err != nil {
		t.Fatal(err)
	}
	r := a.set.Load().Rule("login")
	if !r.Shadow || r.Limits[0].Requests != 50 {
		t.Fatalf("login after the two changes: shadow %v, %d requests; want shadow at 50 (b's change kept)", r.Shadow, r.Limits[0].Requests)
	}
	if res.Change.Version != 2 {
		t.Errorf("a's change stored version %d, want 2 (after b's)", res.Change.Version)
	}

	interpose = 3
	c := s.start(withInterposed(&interpose, func() {
		body := []byte(`{"id": "login", "match": {"endpoints": ["/login"]}, "key": ["ip"],
			"algorithm": "fixed_window", "limits": [{"requests": ` + strconv.Itoa(limit) + `, "per": "1m"}]}`)
		limit++
		if _, err := b.Put(context.Background(), "login", body, alice); err != nil {
			t.Error(err)
		}
	}))
	if _, err := c.SetShadow(context.Background(), "login", false, alice); !errors.Is(err, rulesync.ErrConflict) {
		t.Fatalf("a change overtaken three times: %v; want rulesync.ErrConflict", err)
	}
	if r, v := b.set.Load().Rule("login"), b.View().DynamicVersion; r.Shadow || r.Limits[0].Requests != 53 || v != 5 {
		t.Errorf("after the conflict: shadow %v, %d requests, version %d; want b's last change alone (53, not in shadow, version 5)",
			r.Shadow, r.Limits[0].Requests, v)
	}
}
