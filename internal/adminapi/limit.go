package adminapi

import (
	"net/netip"
	"sync"
	"time"

	"github.com/ratewarden/ratewarden/internal/rules"
)

// The admin API is for people and scripts: a few requests per second per
// source is plenty, and it bounds token guessing.
const (
	sourceRate  = 10 // requests per second per source
	sourceBurst = 20
	maxSources  = 4096 // sources tracked; beyond it new sources share one bucket

	// sourcePrefix groups IPv6 sources of the admin API: a /64 is one
	// source, so a client cannot multiply its token guesses by rotating
	// addresses. Fixed rather than detection.ipv6_prefix, so that a
	// detection setting (128 turns grouping off) cannot loosen the guard on
	// the token.
	sourcePrefix = rules.DefaultIPv6Prefix
)

// sourceLimiter is a token bucket per source address, in memory: rate tokens
// a second up to burst. At most max sources are tracked; when the table is
// full, sources whose bucket has refilled are forgotten, and if none has,
// new sources share one overflow bucket, so memory stays bounded whatever
// the number of addresses a client controls.
//
// It is not decide.Memory, whose bound evicts state: an evicted bucket comes
// back full, which is harmless in local mode (a limit can only become more
// lenient) but would hand a client rotating addresses a fresh burst of token
// guesses per address. It also remembers whether a refusal was logged.
type sourceLimiter struct {
	rate, burst float64
	max         int
	now         func() time.Time

	mu       sync.Mutex
	buckets  map[netip.Prefix]*sourceBucket // by source: IPv4 address, IPv6 /64
	overflow sourceBucket
}

type sourceBucket struct {
	tokens  float64
	last    time.Time
	refused bool // a refusal was logged since the last admitted request
}

func newSourceLimiter(rate, burst float64, max int, now func() time.Time) *sourceLimiter {
	return &sourceLimiter{rate: rate, burst: burst, max: max, now: now,
		buckets: make(map[netip.Prefix]*sourceBucket), overflow: sourceBucket{tokens: burst}}
}

// allow takes a token for source (the /64 of an IPv6 source). When there
// is none it returns how long until there is, and whether this is the
// first refusal since the source was last admitted.
func (l *sourceLimiter) allow(addr netip.Addr) (wait time.Duration, firstRefusal bool) {
	source := rules.IPPrefix(addr, sourcePrefix)
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.buckets[source]
	if b == nil {
		if len(l.buckets) >= l.max {
			l.sweep(now)
		}
		if len(l.buckets) >= l.max {
			b = &l.overflow
		} else {
			b = &sourceBucket{tokens: l.burst, last: now}
			l.buckets[source] = b
		}
	}
	if !b.last.IsZero() {
		b.tokens = min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.rate)
	}
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		b.refused = false
		return 0, false
	}
	first := !b.refused
	b.refused = true
	return time.Duration((1 - b.tokens) / l.rate * float64(time.Second)), first
}

// sweep forgets the sources whose bucket would be full by now: they lose
// nothing by starting over.
func (l *sourceLimiter) sweep(now time.Time) {
	for a, b := range l.buckets {
		if b.tokens+now.Sub(b.last).Seconds()*l.rate >= l.burst {
			delete(l.buckets, a)
		}
	}
}
