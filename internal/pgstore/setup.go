package pgstore

import (
	"context"
	"fmt"
)

// OpenMigrated is how every process and test opens the database: it creates
// the database when it is missing (EnsureDatabase), connects (Open) and
// applies the embedded migrations (Migrate), closing the pool again when
// they fail.
//
// createFailed decides what a failure to create the database means: nil
// stops with that error; otherwise OpenMigrated stops with what
// createFailed returns, or carries on when it returns nil (the database may
// exist after all, and Open then says whether it does).
func OpenMigrated(ctx context.Context, url string, createFailed func(error) error) (*Store, error) {
	if err := EnsureDatabase(ctx, url); err != nil {
		if createFailed == nil {
			return nil, err
		}
		if err := createFailed(err); err != nil {
			return nil, err
		}
	}
	store, err := Open(ctx, url)
	if err != nil {
		return nil, err
	}
	if err := store.Migrate(ctx); err != nil {
		store.Close()
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	return store, nil
}
