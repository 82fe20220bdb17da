package pgrules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/ratewarden/ratewarden/internal/pgstore"
	"github.com/ratewarden/ratewarden/internal/testkit/pgtest"

	"github.com/ratewarden/ratewarden/internal/rulesync"
)

// Each change bumps the set version once, writes the rule and one audit row
// with the before and after images; a failed change leaves all three alone.
func TestDynamicRuleChanges(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	who := rulesync.Author{Actor: "alice", SourceAddr: "192.0.2.1", Instance: "l1"}

	if v, rules, err := s.DynamicRules(ctx); err != nil || v != 0 || len(rules) != 0 {
		t.Fatalf("fresh database: version %d, %d rules, %v; want 0, 0", v, len(rules), err)
	}
	first := json.RawMessage(`{"id": "login", "limits": [{"requests": 100, "per": "1m"}]}`)
	c1, err := s.Change(ctx, "login", who, put(first))
	if err != nil {
		t.Fatal(err)
	}
	if c1.Version != 1 || c1.Before != nil || c1.ChangedAt.IsZero() {
		t.Fatalf("first put: %+v; want version 1, no before image", c1)
	}
	second := json.RawMessage(`{"id": "login", "limits": [{"requests": 50, "per": "1m"}]}`)
	refusal := errors.New("refused")
	if _, err := s.Change(ctx, "login", who, func(int64, []rulesync.StoredRule) (json.RawMessage, error) { return nil, refusal }); !errors.Is(err, refusal) {
		t.Fatalf("a change prepare refused: %v; want prepare's error as it is", err)
	}
	if v, _ := s.RulesVersion(ctx); v != 1 {
		t.Fatalf("a refused change moved the version to %d", v)
	}
	c2, err := s.Change(ctx, "login", rulesync.Author{Actor: "bob", SourceAddr: "192.0.2.2", Instance: "l2"},
		func(v int64, stored []rulesync.StoredRule) (json.RawMessage, error) {
			if v != 1 || len(stored) != 1 || !sameJSON(t, stored[0].Rule, first) {
				t.Errorf("prepare got version %d, %+v; want 1 and the first rule", v, stored)
			}
			return second, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if c2.Version != 2 || !sameJSON(t, c2.Before, first) {
		t.Fatalf("second put: version %d, before %s; want 2 and the first rule", c2.Version, c2.Before)
	}
	v, rules, err := s.DynamicRules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v != 2 || len(rules) != 1 || rules[0].ID != "login" || rules[0].Version != 2 || rules[0].UpdatedBy != "bob" ||
		!sameJSON(t, rules[0].Rule, second) {
		t.Fatalf("after two puts: version %d, rules %+v", v, rules)
	}

	if _, err := s.Change(ctx, "absent", who, put(nil)); !errors.Is(err, rulesync.ErrNotStored) {
		t.Fatalf("delete of an absent rule: %v; want rulesync.ErrNotStored", err)
	}
	if v, _ := s.RulesVersion(ctx); v != 2 {
		t.Fatalf("a refused delete moved the version to %d", v)
	}
	c3, err := s.Change(ctx, "login", who, put(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c3.Version != 3 || !sameJSON(t, c3.Before, second) || c3.After != nil {
		t.Fatalf("delete: %+v", c3)
	}
	if v, rules, _ := s.DynamicRules(ctx); v != 3 || len(rules) != 0 {
		t.Fatalf("after delete: version %d, %d rules", v, len(rules))
	}

	type audit struct {
		version             int64
		rule, action, actor string
		source, instance    string
		hasBefore, hasAfter bool
	}
	rows, err := s.pool.Query(ctx, `SELECT version, rule_id, action, actor, source_addr, instance,
		before IS NOT NULL, after IS NOT NULL FROM rule_changes ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	var got []audit
	for rows.Next() {
		var a audit
		if err := rows.Scan(&a.version, &a.rule, &a.action, &a.actor, &a.source, &a.instance, &a.hasBefore, &a.hasAfter); err != nil {
			t.Fatal(err)
		}
		got = append(got, a)
	}
	want := []audit{
		{1, "login", "put", "alice", "192.0.2.1", "l1", false, true},
		{2, "login", "put", "bob", "192.0.2.2", "l2", true, true},
		{3, "login", "delete", "alice", "192.0.2.1", "l1", true, false},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("audit rows:\n got %v\nwant %v", got, want)
	}
}

// Concurrent writers get distinct, gapless versions, each prepared against
// the version before its own, and the last one stored for a rule is the
// one with the highest version.
func TestDynamicRuleVersionsUnderConcurrency(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	const writers = 20
	var wg sync.WaitGroup
	versions := make(chan int64, writers)
	for i := range writers {
		wg.Go(func() {
			var base int64
			c, err := s.Change(ctx, fmt.Sprintf("r%d", i%4), rulesync.Author{Actor: "t"},
				func(v int64, _ []rulesync.StoredRule) (json.RawMessage, error) {
					base = v
					return json.RawMessage(fmt.Sprintf(`{"n": %d}`, i)), nil
				})
			if err != nil {
				t.Error(err)
				return
			}
			if c.Version != base+1 {
				t.Errorf("a change prepared against version %d stored version %d", base, c.Version)
			}
			versions <- c.Version
		})
	}
	wg.Wait()
	close(versions)
	seen := map[int64]bool{}
	for v := range versions {
		if seen[v] || v < 1 || v > writers {
			t.Fatalf("version %d repeated or out of 1..%d", v, writers)
		}
		seen[v] = true
	}
	v, rules, err := s.DynamicRules(ctx)
	if err != nil || v != writers || len(rules) != 4 {
		t.Fatalf("version %d, %d rules, %v; want %d, 4", v, len(rules), err, writers)
	}
	for _, r := range rules {
		var last int64
		if err := s.pool.QueryRow(ctx, "SELECT max(version) FROM rule_changes WHERE rule_id = $1", r.ID).Scan(&last); err != nil {
			t.Fatal(err)
		}
		if r.Version != last {
			t.Errorf("rule %s stored at version %d, its last change is %d", r.ID, r.Version, last)
		}
	}
}

// put is a prepare that stores rule whatever the set holds (nil: deletes).
func put(rule json.RawMessage) rulesync.Prepare {
	return func(int64, []rulesync.StoredRule) (json.RawMessage, error) { return rule, nil }
}

func sameJSON(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return fmt.Sprint(x) == fmt.Sprint(y)
}

// newStore is a rule store on a fresh, migrated database of the test's own.
func newStore(t *testing.T) *Store {
	t.Helper()
	ctx := context.Background()
	db, err := pgstore.OpenMigrated(ctx, pgtest.Database(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return New(db)
}

// A change whose commit's answer is lost (a deadline, a connection cut
// while COMMIT was on its way) is read back by its audit row: stored, it
// is answered as made; not stored, as the commit's error. Before, both
// answered the commit's error, so the admin API said "rule not changed"
// of a rule it had changed.
func TestChangeWhoseCommitAnswerIsLost(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	who := rulesync.Author{Actor: "alice"}
	lost := errors.New("answer lost")
	rule := json.RawMessage(`{"id": "login", "limits": [{"requests": 100, "per": "1m"}]}`)

	s.commit = func(ctx context.Context, tx pgx.Tx) error {
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		return lost
	}
	c, err := s.Change(ctx, "login", who, put(rule))
	if err != nil || c.Version != 1 || !sameJSON(t, c.After, rule) {
		t.Fatalf("committed, answer lost: %+v, %v; want version 1 and no error", c, err)
	}

	s.commit = func(ctx context.Context, tx pgx.Tx) error {
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		return lost
	}
	if _, err := s.Change(ctx, "login", who, put(json.RawMessage(`{"id": "login", "limits": [{"requests": 5, "per": "1m"}]}`))); !errors.Is(err, lost) || errors.Is(err, rulesync.ErrOutcomeUnknown) {
		t.Fatalf("not committed, answer lost: %v; want the commit's error", err)
	}
	if v, rules, err := s.DynamicRules(ctx); err != nil || v != 1 || len(rules) != 1 || !sameJSON(t, rules[0].Rule, rule) {
		t.Fatalf("after the lost commit: version %d, %+v, %v; want version 1 and the first rule", v, rules, err)
	}

	s.commit = func(ctx context.Context, tx pgx.Tx) error {
		tx.Commit(ctx) //nolint:errcheck
		s.pool.Close() // nothing can be read back
		return lost
	}
	if _, err := s.Change(ctx, "login", who, put(rule)); !errors.Is(err, rulesync.ErrOutcomeUnknown) {
		t.Fatalf("answer lost, read-back failed: %v; want ErrOutcomeUnknown", err)
	}
}
