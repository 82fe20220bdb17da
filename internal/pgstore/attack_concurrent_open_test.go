package pgstore

import (
	"context"
	"sync"
	"testing"

	"github.com/ratewarden/ratewarden/internal/testkit/pgtest"
)

// FINDING (reproduces a defect; this test fails until it is fixed): several
// processes (archivers, limiters with DYNAMIC_RULES) opening the same fresh
// database at once. Concurrent CREATE DATABASE often fails with SQLSTATE
// 23505 (unique_violation on pg_database_datname_index), not 42P04, which
// EnsureDatabase takes as "created concurrently": OpenMigrated with a nil
// createFailed (the limiter's rule store) then fails although the database
// now exists.
func TestAttackConcurrentOpenMigratedFreshDatabase(t *testing.T) {
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
