package rulesync_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/rulesync"
)

// hangingStore is a memStore whose writes wait until released: a Postgres
// whose tables are locked (a long migration, LOCK TABLE), or unreachable
// behind a silent network.
type hangingStore struct {
	*memStore
	release chan struct{}
}

func (s *hangingStore) Change(ctx context.Context, id string, who rulesync.Author, prepare rulesync.Prepare) (rulesync.Change, error) {
	<-s.release
	return s.memStore.Change(ctx, id, who, prepare)
}

// The rules file and the RLS directory are reloaded while an admin write
// waits on the store: the write holds the store source's lock, and the
// store's polls wait for it, but they run apart from the files' polls and
// SIGHUP. (Seen on the real binary before: a PUT /v1/admin/rules/x against
// a Postgres with its rule tables locked hung 39s, and a SIGHUP sent
// meanwhile was handled only when the lock went.)
func TestFileReloadsProceedWhileAnAdminWriteHangsOnTheStore(t *testing.T) {
	store := &hangingStore{memStore: &memStore{rules: map[string]rulesync.StoredRule{}}, release: make(chan struct{})}
	l := startRLS(t, messagingConfig, func(c *rulesync.Config) {
		c.Connect = func(context.Context) (rulesync.Store, error) { return store, nil }
		c.StorePoll = 50 * time.Millisecond
	})
	l.run(t, nil)
	t.Cleanup(func() { close(store.release) })
	go func() {
		_, _ = l.Put(context.Background(), "dyn", []byte(`{"id": "dyn", "match": {"endpoints": ["/d"]}, "key": ["ip"],
			"algorithm": "fixed_window", "limits": [{"requests": 5, "per": "1m"}]}`), rulesync.Author{Actor: "alice"})
	}()
	time.Sleep(200 * time.Millisecond) // the write waits on the store; the Run loop reaches the store poll
	writeFile(t, l.View().File, strings.Replace(fileRules, "requests: 100", "requests: 33", 1))
	deadline := time.Now().Add(3 * time.Second) // 60 file polls
	for time.Now().Before(deadline) && l.limit("login") != 33 {
		time.Sleep(20 * time.Millisecond)
	}
	if got := l.limit("login"); got != 33 {
		t.Errorf("login limit %d 3s after the file changed while an admin write hangs on the store, want 33", got)
	}
}
