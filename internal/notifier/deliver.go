package notifier

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/digest"
)

// maxResponseRead bounds what is read of a receiver's answer (to reuse the
// connection, and to log the start of an error).
const maxResponseRead = 64 << 10

// sender posts digests to receivers until they accept them.
type sender struct {
	client     *http.Client
	timeout    time.Duration
	minBackoff time.Duration
	maxBackoff time.Duration
	log        *zap.Logger
	metrics    *metrics
}

func newSender(timeout, minBackoff, maxBackoff time.Duration, log *zap.Logger, m *metrics) *sender {
	return &sender{
		client: &http.Client{
			// A receiver's redirect is its configuration's mistake: not
			// followed, it fails the attempt and is logged.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		timeout: timeout, minBackoff: minBackoff, maxBackoff: maxBackoff, log: log, metrics: m,
	}
}

// send posts d to r until r accepts it (a 2xx answer), waiting between
// attempts with exponential backoff and jitter. It returns nil once
// accepted, else ctx's error when ctx ends first: a digest is never given
// up on, so a receiver down holds the offsets (and the lag grows) rather
// than losing its digests.
func (s *sender) send(ctx context.Context, r *Receiver, d *digest.Digest) error {
	body, err := digest.Body(d, r.Format)
	if err != nil {
		return err // a defect: the formats are validated at load
	}
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			s.metrics.retries.WithLabelValues(r.Name).Inc()
		}
		result, err := s.post(ctx, r, d.Key, body)
		s.metrics.attempts.WithLabelValues(r.Name, result).Inc()
		if err == nil {
			s.metrics.delivered.WithLabelValues(r.Name).Inc()
			s.metrics.bans.WithLabelValues(r.Name).Add(float64(d.Count))
			s.metrics.digestBans.WithLabelValues(r.Name).Observe(float64(d.Count))
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		wait := s.backoff(attempt)
		s.log.Warn("receiver did not accept the digest, retrying", zap.String("receiver", r.Name), zap.String("key", d.Key),
			zap.String("result", result), zap.Int("attempt", attempt+1), zap.Duration("in", wait), zap.Error(err))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// backoff is the wait after the attempt-th failure: doubling from
// minBackoff up to maxBackoff, each wait drawn between half and all of it
// so that a receiver back up is not met by every digest at once.
func (s *sender) backoff(attempt int) time.Duration {
	d := min(s.minBackoff<<min(attempt, 30), s.maxBackoff)
	if d <= 0 {
		d = s.maxBackoff
	}
	return d/2 + rand.N(d/2+1)
}

// post makes one attempt, bounded by the sender's timeout, and returns its
// result class.
func (s *sender) post(ctx context.Context, r *Receiver, key string, body []byte) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL, bytes.NewReader(body))
	if err != nil {
		return resultOther, err
	}
	for k, v := range r.Headers {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("User-Agent", "ratewarden-notifier")
	resp, err := s.client.Do(req)
	if err != nil {
		return classify(err), err
	}
	defer resp.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponseRead))
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		return resultOK, nil
	case c >= 300 && c < 400:
		return resultRedirect, fmt.Errorf("status %d (redirects are not followed)", c)
	case c >= 400 && c < 500:
		return resultClient, fmt.Errorf("status %d: %q", c, truncate(head, 200))
	case c >= 500:
		return resultServer, fmt.Errorf("status %d: %q", c, truncate(head, 200))
	}
	return resultOther, fmt.Errorf("status %d", resp.StatusCode)
}

func classify(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return resultTimeout
	case errors.As(err, &ne):
		return resultConnection
	}
	return resultOther
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	return string(b)
}
