package limiter

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// BanSet is the limiter's in-memory copy of the blacklist, so a ban check
// costs no Redis round trip: loaded in full at start and on every resync,
// and kept current between them by change notifications. It keeps
// enforcing what it holds while Redis is away.
//
// A full load races with the notifications: a change can be applied while
// the load is reading a blacklist that does not hold it yet. So every
// change gets a local version, and a load replays over what it read the
// changes applied since it began. A change applied before the load began
// was committed to Redis before (it is announced after its write), so the
// load read it, or a later one; only the changes since are in doubt.
//
// An ip-scope subject is an IPv4 address, an IPv6 address or an IPv6
// prefix (a grouped client, see rules.IPSubject). IPv6 bans are also
// indexed by prefix, and BannedAddr finds a client by any ban that covers
// it, whatever the prefix length: a ban issued under another
// detection.ipv6_prefix (the detector reads the rules file at start, the
// limiters on every change) or before grouping existed still applies.
type BanSet struct {
	mu      sync.RWMutex
	state   banState
	version uint64               // changes applied so far
	recent  map[banKey]banChange // the latest change of each subject since the last load began
	sizes   *prometheus.GaugeVec
}

// banKey is a scope and a subject in canonical form (see canonicalSubject).
type banKey struct{ scope, subject string }

// banChange is one applied change: a ban until expires, or an unban.
type banChange struct {
	version uint64
	ban     bool
	expires time.Time
}

// banState is the bans held: by scope and subject, the IPv6 ones also by
// prefix.
type banState struct {
	bans map[string]map[string]time.Time // scope → subject → expiry
	v6   ipv6Bans
}

func newBanState() banState {
	return banState{bans: map[string]map[string]time.Time{event.ScopeIP: {}, event.ScopeUser: {}}, v6: newIPv6Bans()}
}

// apply records a ban of the canonical k until expires, or lifts it.
func (s *banState) apply(k banKey, c banChange) {
	m, ok := s.bans[k.scope]
	if !ok {
		return
	}
	var p netip.Prefix
	if k.scope == event.ScopeIP {
		_, p = ipSubject(k.subject)
	}
	if c.ban {
		m[k.subject] = c.expires
		if p.IsValid() {
			s.v6.set(p, c.expires)
		}
		return
	}
	delete(m, k.subject)
	if p.IsValid() {
		s.v6.remove(p)
	}
}

// ipv6Bans is the IPv6 part of the ip-scope bans, by prefix (an address as
// its /128), with the prefix lengths in use so that a lookup tries only
// those.
type ipv6Bans struct {
	until  map[netip.Prefix]time.Time
	perLen [129]int // bans per prefix length
	lens   []int    // lengths with at least one ban, longest first
}

func newIPv6Bans() ipv6Bans { return ipv6Bans{until: map[netip.Prefix]time.Time{}} }

func (v *ipv6Bans) set(p netip.Prefix, until time.Time) {
	if _, ok := v.until[p]; !ok {
		v.perLen[p.Bits()]++
		if v.perLen[p.Bits()] == 1 {
			v.updateLens()
		}
	}
	v.until[p] = until
}

func (v *ipv6Bans) remove(p netip.Prefix) {
	if _, ok := v.until[p]; !ok {
		return
	}
	delete(v.until, p)
	v.perLen[p.Bits()]--
	if v.perLen[p.Bits()] == 0 {
		v.updateLens()
	}
}

func (v *ipv6Bans) updateLens() {
	v.lens = v.lens[:0]
	for n := 128; n >= 0; n-- {
		if v.perLen[n] > 0 {
			v.lens = append(v.lens, n)
		}
	}
}

// find returns the latest expiry of the bans covering a that last beyond
// now. It does not allocate.
func (v *ipv6Bans) find(a netip.Addr, now time.Time) (time.Time, bool) {
	var latest time.Time
	found := false
	for _, n := range v.lens {
		p, _ := a.Prefix(n)
		if until, ok := v.until[p]; ok && now.Before(until) && (!found || until.After(latest)) {
			latest, found = until, true
		}
	}
	return latest, found
}

// ipSubject returns the canonical form of an ip-scope subject (the form
// the limiter looks up) and, for an IPv6 address or prefix, the prefix it
// covers. A subject that is no IP address nor IPv6 prefix is kept as it is,
// with no prefix (it bans nobody the limiter sees, but is listed). So is a
// prefix shorter than rules.MinIPv6Prefix, which neither the detector nor
// the admin API ever writes: a corrupt entry such as ::/0 must not deny
// every IPv6 client.
func ipSubject(subject string) (string, netip.Prefix) {
	p, ok := rules.ParseIPSubject(subject)
	switch {
	case !ok || p.Bits() < rules.MinIPv6Prefix:
		return subject, netip.Prefix{}
	case p.Addr().Is4():
		return p.Addr().String(), netip.Prefix{}
	case p.IsSingleIP():
		return p.Addr().String(), p
	}
	return p.String(), p
}

// canonicalSubject is the key of a subject: ip-scope subjects in the form
// ipSubject gives, others as they are.
func canonicalSubject(scope, subject string) banKey {
	if scope == event.ScopeIP {
		subject, _ = ipSubject(subject)
	}
	return banKey{scope, subject}
}

// NewBanSet returns an empty set reporting rate_limit_blacklist_size{scope},
// 0 for every scope until the first sync.
func NewBanSet(reg prometheus.Registerer) *BanSet {
	b := &BanSet{
		state:  newBanState(),
		recent: map[banKey]banChange{},
		sizes: promauto.With(reg).NewGaugeVec(prometheus.GaugeOpts{
			Name: "rate_limit_blacklist_size",
			Help: "Bans held in the limiter's memory, by scope.",
		}, []string{"scope"}),
	}
	b.report()
	return b
}

// Banned reports until when subject is banned in scope, if it is at now.
func (b *BanSet) Banned(scope, subject string, now time.Time) (time.Time, bool) {
	b.mu.RLock()
	until, ok := b.state.bans[scope][subject]
	b.mu.RUnlock()
	return until, ok && now.Before(until)
}

// BannedAddr reports until when the client at address a is banned, if it
// is at now: by the ban of its IPv4 address, or by the ban of its IPv6
// address or of any IPv6 prefix that contains it (the latest expiry when
// several do). ip is a's text form, as the limiter has it (an IPv4 lookup
// then formats nothing); an invalid a is parsed from ip. It allocates
// nothing for the addresses the limiter passes (IPv4-mapped IPv6 is
// unmapped before).
func (b *BanSet) BannedAddr(a netip.Addr, ip string, now time.Time) (time.Time, bool) {
	if !a.IsValid() {
		a, _ = netip.ParseAddr(ip)
	}
	switch {
	case !a.Is6():
		return b.Banned(event.ScopeIP, ip, now)
	case a.Is4In6(): // the limiter unmaps these; here for callers that do not
		return b.Banned(event.ScopeIP, a.Unmap().String(), now)
	}
	b.mu.RLock()
	until, ok := b.state.v6.find(a.WithZone(""), now)
	b.mu.RUnlock()
	return until, ok
}

// Load replaces the set with the full blacklist list returns, keeping the
// changes applied while it was read. On error the set stays as it is.
func (b *BanSet) Load(ctx context.Context, list func(context.Context) ([]event.Ban, error)) error {
	b.mu.RLock()
	since := b.version
	b.mu.RUnlock()
	bans, err := list(ctx)
	if err != nil {
		return err
	}
	b.replace(bans, since)
	return nil
}

// replace swaps the whole set for bans, read after the set was at version
// since, then applies again the changes made after since.
func (b *BanSet) replace(bans []event.Ban, since uint64) {
	next := newBanState()
	for _, ban := range bans {
		if ban.Action == event.ActionBan {
			next.apply(canonicalSubject(ban.Scope, ban.Subject), banChange{ban: true, expires: ban.ExpiresAt})
		}
	}
	b.mu.Lock()
	for k, c := range b.recent {
		if c.version <= since {
			delete(b.recent, k) // the load holds it, or a later change
			continue
		}
		next.apply(k, c)
	}
	b.state = next
	b.mu.Unlock()
	b.report()
}

// Apply records one change: a ban until expires, or an unban.
func (b *BanSet) Apply(action, scope, subject string, expires time.Time) {
	if action != event.ActionBan && action != event.ActionUnban {
		return
	}
	k := canonicalSubject(scope, subject)
	b.mu.Lock()
	if _, ok := b.state.bans[scope]; ok {
		b.version++
		c := banChange{version: b.version, ban: action == event.ActionBan, expires: expires}
		b.recent[k] = c
		b.state.apply(k, c)
	}
	b.mu.Unlock()
	b.report()
}

// Prune drops expired bans.
func (b *BanSet) Prune(now time.Time) {
	b.mu.Lock()
	for _, m := range b.state.bans {
		for s, until := range m {
			if !now.Before(until) {
				delete(m, s)
			}
		}
	}
	for p, until := range b.state.v6.until {
		if !now.Before(until) {
			b.state.v6.remove(p)
		}
	}
	b.mu.Unlock()
	b.report()
}

func (b *BanSet) report() {
	b.mu.RLock()
	defer b.mu.RUnlock()
	for scope, m := range b.state.bans {
		b.sizes.WithLabelValues(scope).Set(float64(len(m)))
	}
}
