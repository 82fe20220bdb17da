package pgstore

import (
	"context"
	"sync"
	"testing"

	"github.com/ratewarden/ratewarden/internal/testkit/pgtest"
)

// Several processes (archivers, limiters with DYNAMIC_RULES) open the same
// fresh database at once, and each gets it. Concurrent CREATE DATABASE
// fails either with 42P04 or, when the two creations overlap, with 23505
// (unique_violation on pg_database_datname_index): both mean it exists.
func TestConcurrentOpenMigratedOfAFreshDatabase(t *testing.T) {
	for round := 0; round < 8; round++ {
		dbURL := pgtest.Uncreated(t)
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for i := 0; i < 8; i++ {
			wg.Go(func() {
				s, err := OpenMigrated(context.Background(), dbURL, nil)
				if err != nil {
					errs <- err
					return
				}
				s.Close()
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("round %d: %v", round, err)
		}
	}
}
