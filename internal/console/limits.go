package console

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// gate bounds a costly step done for unauthenticated clients (a bcrypt
// comparison): at most slots at once, at most queue more waiting, each for
// at most wait. Past that, enter refuses at once: a flood of logins is
// answered fast instead of making every login, the real user's too, wait
// behind it.
type gate struct {
	slots  chan struct{}
	mu     sync.Mutex
	queued int
	queue  int
	wait   time.Duration
}

func newGate(slots, queue int, wait time.Duration) *gate {
	return &gate{slots: make(chan struct{}, max(slots, 1)), queue: queue, wait: wait}
}

// enter takes a slot; leave must follow a true answer.
func (g *gate) enter(ctx context.Context) bool {
	select {
	case g.slots <- struct{}{}:
		return true
	default:
	}
	g.mu.Lock()
	if g.queued >= g.queue {
		g.mu.Unlock()
		return false
	}
	g.queued++
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.queued--
		g.mu.Unlock()
	}()
	timer := time.NewTimer(g.wait)
	defer timer.Stop()
	select {
	case g.slots <- struct{}{}:
		return true
	case <-timer.C:
		return false
	case <-ctx.Done():
		return false
	}
}

func (g *gate) leave() { <-g.slots }

// inFlight counts each user's archive reads in flight, at most max each: a
// user opening pages in parallel (a script, a storm of reloads) holds that
// many of the archive's connections, never all of them.
type inFlight struct {
	mu     sync.Mutex
	byUser map[string]int
	max    int
}

func newInFlight(max int) *inFlight { return &inFlight{byUser: map[string]int{}, max: max} }

// start counts one more read of user, unless user has max in flight.
func (f *inFlight) start(user string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.byUser[user] >= f.max {
		return false
	}
	f.byUser[user]++
	return true
}

// done ends a read of user; a user without reads is forgotten, so the
// state is bounded by the reads in flight.
func (f *inFlight) done(user string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.byUser[user]--; f.byUser[user] <= 0 {
		delete(f.byUser, user)
	}
}

// reading admits a page that reads the archive while its user has fewer
// than maxReadsPerUser such pages in flight; past that it answers 429.
func (s *Server) reading(next authed) authed {
	return func(w http.ResponseWriter, r *http.Request, ss session) {
		if !s.reads.start(ss.user.Name) {
			s.metrics.refused.WithLabelValues("reads_in_flight").Inc()
			s.render(w, r, http.StatusTooManyRequests, "error", ss, errorPage{Title: "Too many pages at once",
				Message: "You have other pages loading from the archive: wait for them, then reload this one."})
			return
		}
		defer s.reads.done(ss.user.Name)
		next(w, r, ss)
	}
}
