// Package lifecycle runs the parts of a process: it starts them one after
// the other, in the order they were added, and when the process is told to
// stop (or a part fails) stops them in the reverse order, under one
// deadline. A limiter so opens no listener before it is warm, and stops
// intake before it stops following rules and bans, flushes its events and
// closes Redis.
//
// Run groups such as Prometheus's (oklog/run) or an errgroup start their
// members at once and stop them at once; these processes need an order in
// both directions, which is all this package adds.
package lifecycle

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// Part is one piece of a process. Every field but Name may be nil.
type Part struct {
	Name string
	// Start readies the part; the next part starts once it has returned.
	// An error ends the start: the parts started so far are stopped, in
	// reverse order, and Run returns the error.
	Start func(ctx context.Context) error
	// Run runs on a goroutine of its own from after Start until the part is
	// stopped, when its ctx ends. Returning before that stops the process,
	// and its error is what the group's Run returns.
	Run func(ctx context.Context) error
	// Stop stops the part within ctx's deadline, shared by every part. It
	// is called while Run's ctx still lasts (a server stops accepting and
	// drains, then its Run returns); Run is then stopped and waited for.
	Stop func(ctx context.Context) error
}

// Group is the parts of one process.
type Group struct {
	log     *zap.Logger
	timeout time.Duration
	parts   []Part
}

// New returns an empty group whose shutdown takes at most timeout
// (SHUTDOWN_TIMEOUT).
func New(log *zap.Logger, timeout time.Duration) *Group {
	return &Group{log: log, timeout: timeout}
}

// Add appends parts: they start after those added before, and stop before
// them.
func (g *Group) Add(parts ...Part) { g.parts = append(g.parts, parts...) }

// ending is a Run that returned before its part was stopped.
type ending struct {
	part string
	err  error
}

// running is a started part.
type running struct {
	Part
	cancel context.CancelFunc // of Run's ctx; nil without Run
	done   chan struct{}      // closed when Run has returned
}

// Run starts the parts in order, then waits until ctx ends or a part fails,
// and stops the started parts in reverse order. It returns the error of the
// part that failed to start or failed while running, or nil.
func (g *Group) Run(ctx context.Context) error {
	ended := make(chan ending, len(g.parts)) // Runs that returned on their own
	var started []*running
	var err error
	for _, p := range g.parts {
		if ctx.Err() != nil { // stopped while starting
			break
		}
		if p.Start != nil {
			if err = p.Start(ctx); err != nil {
				break
			}
		}
		r := &running{Part: p}
		if p.Run != nil {
			// Not derived from ctx: each Run ends when its own part stops.
			rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
			r.cancel, r.done = cancel, make(chan struct{})
			go func() {
				defer close(r.done)
				if rerr := p.Run(rctx); rctx.Err() == nil {
					ended <- ending{p.Name, rerr}
				}
			}()
		}
		started = append(started, r)
	}
	if err == nil && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case e := <-ended:
			g.log.Error("part ended on its own, stopping", zap.String("part", e.part), zap.Error(e.err))
			if e.err != nil {
				err = fmt.Errorf("%s: %w", e.part, e.err)
			}
		}
	}
	g.log.Info("shutting down")
	g.stop(started)
	g.log.Info("stopped")
	return err
}

// stop stops the started parts in reverse order under one deadline. A part
// that does not stop in time is left behind, logged, and the others are
// stopped all the same.
func (g *Group) stop(started []*running) {
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	for i := len(started) - 1; i >= 0; i-- {
		r := started[i]
		if r.Stop != nil {
			if err := r.Stop(ctx); err != nil {
				g.log.Warn("part stopped with an error", zap.String("part", r.Name), zap.Error(err))
			}
		}
		if r.cancel != nil {
			r.cancel()
			select {
			case <-r.done:
			case <-ctx.Done():
				g.log.Warn("part did not stop within the shutdown deadline", zap.String("part", r.Name), zap.Duration("timeout", g.timeout))
			}
		}
		g.log.Debug("part stopped", zap.String("part", r.Name))
	}
}

// Main runs a command's run function with a context that ends at SIGINT or
// SIGTERM, then exits: status 0 when run returns nil, else 1 after printing
// "name: error" on stderr.
func Main(name string, run func(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}
