// Package notifier sends the bans, unbans and warnings of the bans topic to
// webhooks as digests: it reads the topic in a consumer group of its own,
// closes a window of the messages' timestamps every NOTIFY_DIGEST_DELAY,
// posts each receiver its digests of the window (retrying with backoff
// until they are accepted) and only then commits the window's offsets.
// Delivery is at least once; each digest carries an idempotency key that
// is the same when it is sent again.
package notifier

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/ratewarden/ratewarden/internal/digest"
	"github.com/ratewarden/ratewarden/internal/event"
)

// Config configures a Service.
type Config struct {
	Receivers []Receiver
	// Delay is the length of a digest's window; Grace how long after its
	// end a window waits for its last messages.
	Delay, Grace time.Duration
	// MaxPending bounds the messages held: past it, fetching stops.
	MaxPending int
	// MaxDigests bounds the digests a receiver gets of one window (and
	// as many of its misdated messages); 0: digest.DefaultMaxDigests.
	MaxDigests int
	// Timeout bounds one request to a receiver; MinBackoff and MaxBackoff
	// bound the wait between attempts.
	Timeout, MinBackoff, MaxBackoff time.Duration
	// Now is the clock that closes windows. Nil: time.Now.
	Now func() time.Time
}

// Reader is the consumer-group reader of the bans topic
// (kafkabus.GroupReader).
type Reader interface {
	// Fetch returns the next message and its partition's high-water mark.
	Fetch(ctx context.Context) (event.Message, int64, error)
	// Commit commits, per partition, up to the highest offset given.
	Commit(ctx context.Context, msgs []event.Message) error
	Lag() int64
}

// Service is the notifier's core: Run reads, digests, delivers, commits.
type Service struct {
	cfg     Config
	log     *zap.Logger
	metrics *metrics
	sender  *sender
}

// New returns a service over cfg's receivers, its metrics registered on
// reg.
func New(cfg Config, log *zap.Logger, reg prometheus.Registerer) (*Service, error) {
	if len(cfg.Receivers) == 0 || cfg.Delay <= 0 || cfg.Grace < 0 || cfg.MaxPending <= 0 || cfg.Timeout <= 0 || cfg.MaxBackoff <= 0 {
		return nil, errors.New("notifier: receivers, a delay, a grace, a pending bound, a timeout and a backoff are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxDigests <= 0 {
		cfg.MaxDigests = digest.DefaultMaxDigests
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = min(time.Second, cfg.MaxBackoff)
	}
	names := make([]string, len(cfg.Receivers))
	for i, r := range cfg.Receivers {
		names[i] = r.Name
	}
	m := newMetrics(reg, names)
	return &Service{cfg: cfg, log: log, metrics: m, sender: newSender(cfg.Timeout, cfg.MinBackoff, cfg.MaxBackoff, log, m)}, nil
}

// fetched is one message as the fetching goroutine hands it over.
type fetched struct {
	msg event.Message
	hwm int64
}

// Run reads rd until ctx ends or rd fails for good: every message goes into
// the window of its timestamp; a window closes once due (see windows.due),
// its digests are delivered to every receiver that wants them, and then
// its offsets are committed. When ctx ends, the windows not delivered stay
// uncommitted: they are read again at the next start and digested alike.
func (s *Service) Run(ctx context.Context, rd Reader) error {
	in := make(chan fetched)
	fetchCtx, stopFetch := context.WithCancel(ctx)
	fetchErr := make(chan error, 1)
	go func() {
		defer close(fetchErr)
		for {
			m, hwm, err := rd.Fetch(fetchCtx)
			if err != nil {
				fetchErr <- err
				return
			}
			select {
			case in <- fetched{m, hwm}:
			case <-fetchCtx.Done():
				return
			}
		}
	}()
	defer func() { stopFetch(); <-fetchErr }()

	w := newWindows(s.cfg.Delay, s.cfg.Grace, s.cfg.MaxPending)
	tick := time.NewTicker(min(max(s.cfg.Grace/2, 10*time.Millisecond), time.Second))
	defer tick.Stop()
	for {
		recv := in
		if w.full() {
			recv = nil // a receiver is behind: stop fetching, let the lag grow
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-fetchErr:
			if ctx.Err() != nil || err == nil {
				return nil
			}
			return err
		case f := <-recv:
			s.add(w, f)
		case <-tick.C:
		}
		if err := s.closeDue(ctx, rd, w); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// add decodes f's ban and puts it in its window; a message that is not a
// ban is counted and held all the same, to be committed with its window.
func (s *Service) add(w *windows, f fetched) {
	s.metrics.messages.Inc()
	b, err := event.DecodeBan(f.msg.Value)
	var ban *event.Ban
	if err != nil {
		s.metrics.skipped.WithLabelValues(skipUndecodable).Inc()
		s.log.Debug("skipped a message that is not a ban", zap.Int("partition", f.msg.Partition), zap.Int64("offset", f.msg.Offset), zap.Error(err))
	} else {
		b = digest.Trim(b) // what is held is bounded, whatever the message held
		ban = &b
	}
	f.msg.Value = nil
	w.add(f.msg, f.hwm, ban, s.cfg.Now())
	s.metrics.pending.Set(float64(w.len()))
}

// closeDue delivers and commits, oldest first, every window that is due.
func (s *Service) closeDue(ctx context.Context, rd Reader, w *windows) error {
	for {
		idx, ok := w.oldest()
		if !ok || !w.due(idx, s.cfg.Now()) {
			return nil
		}
		win := w.take(idx)
		if err := s.deliver(ctx, idx, win); err != nil {
			w.putBack(idx, win)
			return err
		}
		commitCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		err := rd.Commit(commitCtx, w.settle(win.msgs))
		cancel()
		if err != nil {
			// Delivered: a failed commit only means the window may be
			// read and sent again after a restart, with the same keys.
			s.log.Warn("offset commit failed", zap.Error(err))
		}
		_, end := digest.WindowBounds(idx, s.cfg.Delay)
		s.metrics.windowClosed.Set(float64(end.Unix()))
		s.metrics.pending.Set(float64(w.len()))
		s.metrics.lag.Set(float64(rd.Lag()))
		w.resumed(s.cfg.Now())
	}
}

// deliver builds window idx's digests and posts each receiver its own,
// the receivers side by side (one down does not hold the others' digests
// back, though the window's commit waits for all). It returns once every
// digest is accepted, or with ctx's error.
func (s *Service) deliver(ctx context.Context, idx int64, win *window) error {
	start, end := digest.WindowBounds(idx, s.cfg.Delay)
	g, gctx := errgroup.WithContext(ctx)
	total := 0
	for i := range s.cfg.Receivers {
		r := &s.cfg.Receivers[i]
		digests := s.digests(r, start, end, win)
		total += len(digests)
		g.Go(func() error {
			for i := range digests {
				if err := s.sender.send(gctx, r, &digests[i]); err != nil {
					return fmt.Errorf("receiver %s: %w", r.Name, err)
				}
				s.log.Info("digest delivered", zap.String("receiver", r.Name), zap.String("key", digests[i].Key),
					zap.String("action", digests[i].Action), zap.String("scope", digests[i].Scope),
					zap.String("scenario", digests[i].Scenario), zap.Int("count", digests[i].Count))
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	s.log.Debug("window closed", zap.Time("start", start), zap.Int("messages", len(win.msgs)), zap.Int("digests", total))
	return nil
}

// digests returns r's digests of win: those of the bans placed by their
// timestamps, then apart those of the misdated bans, so that the honest
// bans' digests, and keys, do not depend on when a misdated one was read.
func (s *Service) digests(r *Receiver, start, end time.Time, win *window) []digest.Digest {
	var out []digest.Digest
	for _, misdated := range []bool{false, true} {
		b := digest.NewBuilder(start, end, r.Examples)
		b.LimitDigests(s.cfg.MaxDigests)
		for i, ban := range win.bans {
			if ban != nil && win.misdated[i] == misdated && r.Selector.Wants(ban) { // nil: not a ban, committed all the same
				b.Add(r.Name, ban)
			}
		}
		out = append(out, b.Digests()...)
	}
	return out
}
