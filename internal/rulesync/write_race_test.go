package rulesync_test

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/rulesync"
	"github.com/ratewarden/ratewarden/internal/testkit"
)

// interposedStore lets another limiter's change land after this limiter
// was asked for a change and before its store transaction.
type interposedStore struct {
	rulesync.Store
	other func()
}

func (s *interposedStore) Change(ctx context.Context, id string, who rulesync.Author, prepare rulesync.Prepare) (rulesync.Change, error) {
	s.other()
	return s.Store.Change(ctx, id, who, prepare)
}

// withInterposed wraps the limiter's store in an interposedStore.
func withInterposed(other func()) option {
	return func(c *rulesync.Config) {
		connect := c.Connect
		c.Connect = func(ctx context.Context) (rulesync.Store, error) {
			st, err := connect(ctx)
			if err != nil {
				return nil, err
			}
			return &interposedStore{Store: st, other: other}, nil
		}
	}
}

// loginAt returns the rule login at n requests a minute, as JSON.
func loginAt(n int) []byte {
	return []byte(`{"id": "login", "match": {"endpoints": ["/login"]}, "key": ["ip"],
		"algorithm": "fixed_window", "limits": [{"requests": ` + strconv.Itoa(n) + `, "per": "1m"}]}`)
}

// Two limiters change the same rule at once: b puts it at 50 requests
// while a, which has not heard of that yet, puts it in shadow mode, a
// change made from the rule as it stands. Made from the rule a held, it
// would put the rule back at 100, undoing b's change; made in the store's
// transaction, from the rule as stored, it keeps b's 50.
func TestConcurrentChangesOnTwoLimiters(t *testing.T) {
	s := newSystem(t)
	b := s.start(withoutAnnouncements)
	a := s.start(withoutAnnouncements, withInterposed(func() {
		if _, err := b.Put(context.Background(), "login", loginAt(50), alice); err != nil {
			t.Error(err)
		}
	}))
	res, err := a.SetShadow(context.Background(), "login", true, alice)
	if err != nil {
		t.Fatal(err)
	}
	r := a.set.Load().Rule("login")
	if !r.Shadow || r.Limits[0].Requests != 50 || res.Change.Version != 2 {
		t.Fatalf("login after the two changes: shadow %v, %d requests, version %d; want shadow at 50, version 2 (b's change kept)",
			r.Shadow, r.Limits[0].Requests, res.Change.Version)
	}
}

// withOwnRulesFile gives the limiter a rules file of its own, as during a
// rolling deploy of a new file.
func withOwnRulesFile(t *testing.T, content string) option {
	return func(c *rulesync.Config) {
		c.File = filepath.Join(t.TempDir(), "rules.yaml")
		writeFile(t, c.File, content)
	}
}

// A limiter whose files refuse the stored dynamic version keeps an older
// one in force. A change made through it is validated against the version
// it lands on, not the one it holds: here that set does not fit its files,
// so it refuses the change (400), and stores nothing: neither a shadow
// switch made from the rule it holds (which would put back the limits a
// later version set) nor a rule the stored set cannot run beside (a
// duplicate descriptor, a set every limiter would refuse).
func TestChangeThroughALimiterThatRefusedTheStoredVersion(t *testing.T) {
	s := newSystem(t)
	a := s.start()
	b := s.start(withOwnRulesFile(t, legacyKeyFile))
	refused := func(v int64) {
		t.Helper()
		testkit.WaitFor(t, 10*time.Second, "b to refuse version "+strconv.FormatInt(v, 10), func() bool {
			r := b.View().DynamicRefused
			return r != nil && r.Version == v
		})
	}
	if _, err := a.Put(context.Background(), "api-key", []byte(apiKeyRule), alice); err != nil {
		t.Fatal(err)
	}
	refused(1)
	if _, err := a.Put(context.Background(), "login", loginAt(50), alice); err != nil {
		t.Fatal(err)
	}
	other := `{"id": "edge-other", "descriptor": {"domain": "edge", "entries": [{"key": "tenant"}]},
		"algorithm": "sliding_window", "limits": [{"requests": 2, "per": "1h"}]}`
	if _, err := a.Put(context.Background(), "edge-other", []byte(other), alice); err != nil {
		t.Fatal(err)
	}
	refused(3)

	var invalid *rulesync.InvalidError
	if _, err := b.SetShadow(context.Background(), "login", true, alice); !errors.As(err, &invalid) {
		t.Errorf("b's shadow switch: %v; want an InvalidError (the stored set does not fit b's files)", err)
	}
	dup := `{"id": "tenant-b", "descriptor": {"domain": "edge", "entries": [{"key": "tenant"}]},
		"algorithm": "sliding_window", "limits": [{"requests": 5, "per": "1h"}]}`
	if _, err := b.Put(context.Background(), "tenant-b", []byte(dup), alice); !errors.As(err, &invalid) {
		t.Errorf("b's put of a duplicate descriptor: %v; want an InvalidError", err)
	}
	if _, err := a.Put(context.Background(), "tenant-b", []byte(dup), alice); !errors.As(err, &invalid) {
		t.Errorf("a's put of a duplicate descriptor: %v; want an InvalidError", err)
	}
	if v := a.View(); v.DynamicVersion != 3 || v.DynamicRefused != nil || a.set.Load().Rule("login").Limits[0].Requests != 50 {
		t.Errorf("a after the refused changes: version %d, refused %v, login at %d; want version 3 in force, login at 50",
			v.DynamicVersion, v.DynamicRefused, a.set.Load().Rule("login").Limits[0].Requests)
	}
}
