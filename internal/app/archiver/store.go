package archiver

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/pgstore"
)

// openStore opens the database, creating it if it is missing and the role
// may, and migrates the schema.
func openStore(ctx context.Context, cfg config.Archiver, log *zap.Logger) (*pgstore.Store, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return pgstore.OpenMigrated(ctx, cfg.DatabaseURL, func(err error) error {
		log.Warn("could not create the database (it may already exist or the role may not create it)", zap.Error(err))
		return nil
	})
}

// maintainPartitions creates daily partitions ahead of time and drops those
// past retention, with the dead letters past retention, at start and every
// hour.
func maintainPartitions(ctx context.Context, store *pgstore.Store, cfg config.Archiver, clock func() time.Time, log *zap.Logger) {
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		now := clock()
		if err := store.EnsurePartitions(ctx, now, cfg.PartitionsAhead); err != nil && ctx.Err() == nil {
			log.Warn("creating partitions", zap.Error(err))
		}
		dropped, err := store.DropPartitions(ctx, now, cfg.RetentionDays)
		if err != nil && ctx.Err() == nil {
			log.Warn("dropping old partitions", zap.Error(err))
		}
		if len(dropped) > 0 {
			log.Info("dropped partitions past retention", zap.Strings("partitions", dropped))
		}
		if n, err := store.PruneDeadLetters(ctx, cfg.RetentionDays); err != nil && ctx.Err() == nil {
			log.Warn("deleting old dead letters", zap.Error(err))
		} else if n > 0 {
			log.Info("deleted dead letters past retention", zap.Int64("rows", n))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
