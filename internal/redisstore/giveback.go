package redisstore

import (
	"context"
	"errors"

	"github.com/ratewarden/ratewarden/internal/decide"
)

// GiveBack is a placeholder until the give-back scripts land.
func (s *Store) GiveBack(ctx context.Context, gs []decide.GiveBack) ([]int64, []error) {
	errs := make([]error, len(gs))
	for i := range errs {
		errs[i] = errors.New("not yet")
	}
	return nil, errs
}
