package abusetest

import (
	"context"
	"sync"

	"github.com/ratewarden/ratewarden/internal/event"
)

// Published is a detect.Publisher that keeps what it is given, in order.
// Fail, when set, is returned instead (nothing is kept).
type Published struct {
	mu   sync.Mutex
	bans []event.Ban
	Fail error
}

// Publish keeps bans, or returns Fail.
func (p *Published) Publish(_ context.Context, bans ...event.Ban) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.Fail != nil {
		return p.Fail
	}
	p.bans = append(p.bans, bans...)
	return nil
}

// Bans returns what was published so far.
func (p *Published) Bans() []event.Ban {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]event.Ban(nil), p.bans...)
}
