package rulesync_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/rulesync"
	"github.com/ratewarden/ratewarden/internal/testkit"
)

// The sources load at the same time (polls, SIGHUPs and admin changes at
// once, each source on its own), and once they stop the rules in force
// are those their last loads make: the set applied last is the view's,
// and the view names each source's last content. Run it with -race.
func TestSourcesLoadConcurrently(t *testing.T) {
	store := &memStore{rules: map[string]rulesync.StoredRule{}}
	l := startRLS(t, messagingConfig, withStore(store, 5*time.Millisecond), func(c *rulesync.Config) { c.FilePoll = 5 * time.Millisecond })
	l.run(t, nil)
	file, config := l.View().File, filepath.Join(l.dir, "config.yaml")
	// write is writeFile for a goroutine other than the test's.
	write := func(path, content string) {
		if err := os.WriteFile(path+".tmp", []byte(content), 0o600); err != nil {
			t.Error(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Error(err)
		}
	}
	const rounds = 20
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range rounds {
			write(file, strings.Replace(fileRules, "requests: 100", "requests: 300", i%2))
			_ = l.ReloadFile(i%3 == 0)
		}
	})
	wg.Go(func() {
		for i := range rounds {
			write(config, strings.Replace(messagingConfig, "requests_per_unit: 5", "requests_per_unit: 6", i%2))
			_ = l.ReloadRLS(i%3 == 0)
		}
	})
	wg.Go(func() {
		for i := range rounds {
			if _, err := l.SetShadow(context.Background(), "api", i%2 == 0, rulesync.Author{Actor: "alice"}); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()

	shadow, err := l.SetShadow(context.Background(), "api", true, rulesync.Author{Actor: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, file, fileRules)
	writeFile(t, config, messagingConfig)
	testkit.WaitFor(t, 2*time.Second, "the last loads to be in force", func() bool {
		v := l.View()
		return v.Set == l.set.Load() && l.limit("login") == 100 && l.limit("rls.messaging.message_type_marketing.to_number") == 5 &&
			l.set.Load().Rule("api").Shadow && v.DynamicVersion == shadow.Change.Version
	})
	if v := l.View(); v.DynamicRefused != nil {
		t.Errorf("a version refused: %+v", v.DynamicRefused)
	}
}
