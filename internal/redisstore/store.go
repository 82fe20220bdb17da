// Package redisstore runs the rate-limit scripts of package lua on Redis
// (a single server or a cluster) through go-redis.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/lua"
)

// errReply means a script answered something other than its integers.
var errReply = errors.New("unexpected script reply")

// scriptCalls recycles the scriptCall slices of Store.run.
var scriptCalls = sync.Pool{New: func() any { return new([]scriptCall) }}

// errNoClock means a counted call came without its time and without a
// clock to read it from.
var errNoClock = errors.New("counted call without the server's time")

// errNoScript means a valid call's algorithm has no script in package lua.
var errNoScript = errors.New("no script for the algorithm")

// Store decides rate-limit calls with the Lua scripts, and counted calls
// (decide.Call.Counted) with INCRBY and PEXPIRE. It is safe for concurrent
// use.
type Store struct {
	client   redis.UniversalClient
	scripts  map[scriptSet]*algScripts // one per algorithm of lua.Algorithms and debit rule
	commands commandTable              // a cluster client's, for WarmUp
	clocks   clocks                    // the servers' clocks, for counted calls
}

// scriptSet names the scripts of one algorithm and debit rule: those that
// debit admitted calls, those that debit denied calls too
// (decide.Call.DebitDenied), and those of probes (decide.Call.Probe).
type scriptSet struct {
	alg   decide.Algorithm
	debit lua.Debit
}

// debitOf returns the debit rule of c's scripts.
func debitOf(c *decide.Call) lua.Debit {
	switch {
	case c.Probe:
		return lua.DebitNothing
	case c.DebitDenied:
		return lua.DebitDenied
	}
	return lua.DebitAdmitted
}

// algScripts are the scripts of one algorithm and debit rule, one per variant of package
// lua. A call goes to the leanest that decides it (see Store.prepare).
type algScripts struct {
	full    *redis.Script // any call
	noHolds *redis.Script // no penalty and no escalations
	one     *redis.Script // no penalty, no escalations, one limit; nil: none
	lease   *redis.Script // leased calls; nil: none
	reserve *redis.Script // takes (debit admitted) or settles (debit denied) of reservations; nil: none
}

// of returns the script of variant v, or nil.
func (a *algScripts) of(v lua.Variant) *redis.Script {
	switch {
	case a == nil:
		return nil
	case v == lua.Full:
		return a.full
	case v == lua.NoHolds:
		return a.noHolds
	case v == lua.OneLimit:
		return a.one
	case v == lua.Lease:
		return a.lease
	case v == lua.Reserve:
		return a.reserve
	}
	return nil
}

// all returns every script of the algorithm.
func (a *algScripts) all() []*redis.Script {
	var all []*redis.Script
	for _, v := range lua.Variants {
		if sc := a.of(v); sc != nil {
			all = append(all, sc)
		}
	}
	return all
}

// New returns a Store on client (a *redis.Client, *redis.ClusterClient or
// any other UniversalClient). Scripts are sent by digest; Load or WarmUp
// caches them ahead of the first call, and calls fall back to EVAL when a
// server lacks one (restart, SCRIPT FLUSH, new cluster node). Make the
// Store of a cluster client before its first command: WarmUp learns from
// the nodes created after New whether go-redis has its command table.
func New(client redis.UniversalClient) *Store {
	s := &Store{client: client, scripts: make(map[scriptSet]*algScripts, len(lua.Debits)*len(lua.Algorithms))}
	if c, ok := client.(*redis.ClusterClient); ok {
		s.commands.watch(c)
	}
	for _, alg := range lua.Algorithms {
		for _, debit := range lua.Debits {
			script := func(v lua.Variant) *redis.Script {
				if src := lua.Script(alg, v, debit); src != "" {
					return redis.NewScript(src)
				}
				return nil
			}
			s.scripts[scriptSet{decide.Algorithm(alg), debit}] = &algScripts{
				full:    script(lua.Full),
				noHolds: script(lua.NoHolds),
				one:     script(lua.OneLimit),
				lease:   script(lua.Lease),
				reserve: script(lua.Reserve),
			}
		}
	}
	return s
}

// variant returns the leanest variant of the scripts that decides c: a call
// without penalty or escalations never touches the hold and hits keys, so
// it needs neither them nor the escalation arguments.
func variant(c *decide.Call) lua.Variant {
	switch {
	case c.Reserves():
		return lua.Reserve
	case c.Leased:
		return lua.Lease
	case c.Penalty > 0 || len(c.Escalations) > 0:
		return lua.Full
	case len(c.Limits) == 1:
		return lua.OneLimit
	}
	return lua.NoHolds
}

// prepare returns c as a counted call when it is one, else as a call of
// the leanest script of its algorithm that decides it; the script is nil
// when the algorithm has none.
func (s *Store) prepare(c *decide.Call) scriptCall {
	if c.Counted() {
		return countedCall(c)
	}
	return s.scriptOf(c)
}

// scriptOf returns c as a call of the leanest script of its algorithm that
// decides it, counted or not.
func (s *Store) scriptOf(c *decide.Call) scriptCall {
	return s.prepareAs(c, s.leanest(c))
}

// leanest returns the leanest variant of c's scripts that decides c: the
// one-limit script where the algorithm has one, else the one without holds.
func (s *Store) leanest(c *decide.Call) lua.Variant {
	v := variant(c)
	if v == lua.OneLimit && s.scriptsOf(c).of(v) == nil {
		v = lua.NoHolds
	}
	return v
}

// scriptsOf returns the scripts that decide c, nil for an unknown
// algorithm.
func (s *Store) scriptsOf(c *decide.Call) *algScripts {
	return s.scripts[scriptSet{c.Algorithm, debitOf(c)}]
}

// prepareAs returns c as a call of variant v of its algorithm's script; the
// script is nil when there is no such script. The caller makes sure v can
// decide c. A concurrency call has one script, whatever v.
func (s *Store) prepareAs(c *decide.Call, v lua.Variant) scriptCall {
	if c.Algorithm == decide.Concurrency {
		return holdCall(c)
	}
	sc := scriptCall{script: s.scriptsOf(c).of(v)}
	switch v {
	case lua.Full:
		sc.keys, sc.args = keys(c), args(c)
	case lua.Lease:
		sc.keys, sc.args = []string{c.Keys.State}, leaseArgs(c)
		sc.once = c.Lease.Spent > 0 || c.Lease.Unspent > 0
	case lua.Reserve:
		sc.keys, sc.args = []string{c.Keys.State, decide.ReservationKey(c.Keys.State, c.HoldID)}, reserveArgs(c)
	default:
		sc.lean = c
	}
	return sc
}

// Load caches every script on the server; on a cluster ClusterClient sends
// SCRIPT LOAD to every primary and to the replicas CLUSTER SLOTS lists
// (Redis 7 omits those that have no replication offset yet, and does not
// propagate SCRIPT LOAD), so a promoted replica may lack them: the EVAL
// fallback covers it.
func (s *Store) Load(ctx context.Context) error {
	return s.loadScripts(ctx, s.client)
}

// Decide decides calls in one round trip: one EVALSHA for a single call, a
// pipeline of them for several. Calls whose script the server lacks are run
// again with EVAL, which caches it. On error no result is returned; the
// error names the first failing call.
func (s *Store) Decide(ctx context.Context, calls []decide.Call) ([]decide.Result, error) {
	if len(calls) == 0 {
		return nil, nil
	}
	for i := range calls { // nothing is sent when any call is invalid
		if err := calls[i].Validate(); err != nil {
			return nil, callError(calls[i], err)
		}
	}
	calls, err := s.stamp(ctx, calls)
	if err != nil {
		return nil, err
	}
	results := make([]decide.Result, len(calls))
	if errs := s.run(ctx, nil, nil, calls, results); errs != nil {
		for _, err := range errs {
			if err != nil {
				return nil, err
			}
		}
	}
	return results, nil
}

// stamp returns calls with the server's time in the NowMs of their counted
// calls that have none, as Decide needs them: a copy when it sets any. Each
// call's server is asked for its clock when its estimate is missing or older
// than clockRefresh (a lane refreshes it in its round trips instead).
func (s *Store) stamp(ctx context.Context, calls []decide.Call) ([]decide.Call, error) {
	copied := false
	for i := range calls {
		if !calls[i].Counted() || calls[i].NowMs != 0 {
			continue
		}
		clock, err := s.clockOf(ctx, calls[i].Keys.State)
		if err != nil {
			return nil, callError(calls[i], err)
		}
		now, _, err := clock.read(ctx, s.client, calls[i].Keys.State, clockRefresh)
		if err != nil {
			return nil, callError(calls[i], err)
		}
		if !copied {
			calls, copied = slices.Clone(calls), true
		}
		calls[i].NowMs = now
	}
	return calls, nil
}

// clockOf returns the clock of the server that holds key.
func (s *Store) clockOf(ctx context.Context, key string) (*nodeClock, error) {
	c, ok := s.client.(*redis.ClusterClient)
	if !ok {
		return s.clocks.of(""), nil
	}
	node, err := c.MasterForKey(ctx, key)
	if err != nil {
		return nil, err
	}
	return s.clocks.of(node.Options().Addr), nil
}

// run decides calls in one round trip into results (same length). It
// returns nil when every call succeeded, else one error per call (nil for
// those that succeeded), so a pipeline shared by several requests fails
// only the requests whose calls failed.
//
// Counted calls need their NowMs: run sets it from clock on those without
// one (calls are the caller's own copies), asking the server the first
// time, and has the round trip sample the clock again once it is older than
// clockRefresh. With clock nil they must have it already. pipe, when not
// nil, is the caller's pipeline to reuse (see runScripts).
func (s *Store) run(ctx context.Context, clock *nodeClock, pipe redis.Pipeliner, calls []decide.Call, results []decide.Result) []error {
	var errs []error
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(calls))
		}
		errs[i] = callError(calls[i], err)
	}
	pooled := scriptCalls.Get().(*[]scriptCall)
	sc := append((*pooled)[:0], make([]scriptCall, len(calls))...)
	defer func() {
		clear(sc) // drop the references to the calls and commands
		*pooled = sc[:0]
		scriptCalls.Put(pooled)
	}()
	counted := -1 // the first counted call
	for i := range calls {
		if err := calls[i].Validate(); err != nil {
			fail(i, err)
			continue
		}
		if sc[i] = s.prepare(&calls[i]); sc[i].script == nil && sc[i].counted == nil {
			fail(i, errNoScript)
		}
		if sc[i].counted != nil && counted < 0 {
			counted = i
		}
	}
	var now int64
	var age time.Duration
	clockErr := errNoClock // without a clock, counted calls must come with their time
	if counted >= 0 && clock != nil {
		now, age, clockErr = clock.read(ctx, s.client, calls[counted].Keys.State, 0) // refreshed below, in the round trip
	}
	for i := range calls {
		if c := sc[i].counted; c != nil && c.NowMs == 0 {
			if clockErr != nil {
				fail(i, clockErr)
				sc[i].counted = nil
				continue
			}
			c.NowMs = now
		}
	}
	var sampled time.Time // when the clock sample was sent; zero: none
	if counted >= 0 && clockErr == nil && age > clockRefresh {
		sc = append(sc, scriptCall{script: clockScript, keys: []string{calls[counted].Keys.State}})
		sampled = time.Now()
	}
	cmds := runScripts(ctx, s.client, pipe, sc)
	if !sampled.IsZero() {
		if ms, err := cmds[len(calls)].Result(); err == nil && len(ms) == 1 {
			clock.record(sampled, time.Now(), ms[0])
		}
	}
	var refunds []int // denied counted calls whose cost goes back
	for i := range calls {
		switch {
		case sc[i].counted != nil:
			count, err := sc[i].incr.Result()
			if err != nil {
				fail(i, err)
				continue
			}
			results[i] = decide.CountedResult(&calls[i], count)
			if !results[i].Allowed && calls[i].Cost > 0 && !calls[i].DebitDenied && !calls[i].Probe {
				refunds = append(refunds, i)
			}
		case cmds[i] != nil:
			r, err := parse(cmds[i])
			if err != nil {
				fail(i, err)
				continue
			}
			results[i] = r
		}
	}
	if len(refunds) > 0 {
		refund(ctx, s.client, sc, refunds)
	}
	return errs
}

func keys(c *decide.Call) []string {
	return []string{c.Keys.State, c.Keys.Hold, c.Keys.Hits}
}

// args encodes the ARGV of the full scripts (see lua/prelude.lua). Values
// are passed as int64, which go-redis formats with strconv.
func args(c *decide.Call) []any {
	width := limitWidth(c)
	a := make([]any, 0, 5+3*len(c.Escalations)+width*len(c.Limits))
	a = append(a, c.NowMs, c.Cost, c.Penalty.Milliseconds(), int64(len(c.Escalations)))
	for _, e := range c.Escalations {
		a = append(a, e.Triggers, e.Within.Milliseconds(), e.Penalty.Milliseconds())
	}
	a = append(a, int64(len(c.Limits)))
	return appendLimits(a, c)
}

// leanArgs encodes the ARGV of the scripts without holds (see
// lua/noholds.lua and lua/*_one.lua): now, cost and the limits.
func leanArgs(c *decide.Call) []any {
	a := make([]any, 0, 2+limitWidth(c)*len(c.Limits))
	a = append(a, c.NowMs, c.Cost)
	return appendLimits(a, c)
}

// leaseArgs encodes the ARGV of the lease scripts (see lua/lease.lua): now,
// cost, the lease and the limits.
func leaseArgs(c *decide.Call) []any {
	l := c.Lease
	a := make([]any, 0, 6+limitWidth(c)*len(c.Limits))
	a = append(a, c.NowMs, c.Cost, l.Ask, l.Until, l.Spent, l.Unspent)
	return appendLimits(a, c)
}

// reserveArgs encodes the ARGV of the reservation scripts (see
// lua/reserve.lua): now, cost, the lifetime and the limits.
func reserveArgs(c *decide.Call) []any {
	a := make([]any, 0, 3+limitWidth(c)*len(c.Limits))
	a = append(a, c.NowMs, c.Cost, c.Reserve.Milliseconds())
	return appendLimits(a, c)
}

// limitWidth is the number of ARGV of each limit of c.
func limitWidth(c *decide.Call) int {
	if c.Algorithm == decide.TokenBucket {
		return 3
	}
	return 2
}

// appendLimits appends the limits of c as the scripts read them: rate,
// per_ms and burst for the token bucket, else requests and per_ms. The
// scripts name their hash fields after per_ms as strconv writes it.
func appendLimits(a []any, c *decide.Call) []any {
	for _, l := range c.Limits {
		if c.Algorithm == decide.TokenBucket {
			a = append(a, l.Rate, l.Per.Milliseconds(), l.Burst)
		} else {
			a = append(a, l.Requests, l.Per.Milliseconds())
		}
	}
	return a
}

// parse reads the eight integers of a script reply, the ten of the
// concurrency script's or the eleven of a lease script's: the command of
// runScripts, or a generic one (tests run scripts of their own). The last
// is the time the call was decided at.
func parse(cmd redis.Cmder) (decide.Result, error) {
	var n [reserveReply]int64
	var width int
	switch cmd := cmd.(type) {
	case *redis.IntSliceCmd:
		vals, err := cmd.Result()
		if err != nil {
			return decide.Result{}, err
		}
		if !replyWidth(len(vals)) {
			return decide.Result{}, errReply
		}
		width = copy(n[:], vals)
	case *redis.Cmd:
		v, err := cmd.Result()
		if err != nil {
			return decide.Result{}, err
		}
		vals, ok := v.([]any)
		if !ok || !replyWidth(len(vals)) {
			return decide.Result{}, errReply
		}
		for i, x := range vals {
			if n[i], ok = x.(int64); !ok {
				return decide.Result{}, errReply
			}
		}
		width = len(vals)
	default:
		return decide.Result{}, errReply
	}
	r := decide.Result{
		Allowed:    n[0] == 1,
		Held:       n[1] == 1,
		LimitIndex: int(n[2]),
		Limit:      n[3],
		Remaining:  n[4],
		ResetAfter: time.Duration(n[5]) * time.Millisecond,
		RetryAfter: time.Duration(n[6]) * time.Millisecond,
		At:         n[width-1],
	}
	switch width {
	case leaseReply:
		r.Granted, r.LeaseUntil, r.LeaseFor = n[7], n[8], time.Duration(n[9])*time.Millisecond
	case holdReply:
		r.Released, r.Lapsed = n[7] == 1, n[8]
	case reserveReply:
		r.Reserved, r.Settled, r.Refunded, r.Excess = n[7], n[8] == 1, n[9], n[10]
	}
	return r, nil
}

// The widths of the rate-limit scripts' replies: a decision, a leased one
// (with granted, lease deadline and lease_for before the time), a
// concurrency one (with released and lapsed before the time), and a
// reservation's (with reserved, settled, refunded and excess before it).
const (
	decideReply  = 8
	holdReply    = 10
	leaseReply   = 11
	reserveReply = 12
)

// replyWidth reports whether n is the width of a rate-limit script's reply.
func replyWidth(n int) bool {
	return n == decideReply || n == holdReply || n == leaseReply || n == reserveReply
}

// maxKeyInError bounds the part of a key quoted in an error: keys embed
// user-supplied values.
const maxKeyInError = 64

func callError(c decide.Call, err error) error {
	key := c.Keys.State
	if len(key) > maxKeyInError {
		key = key[:maxKeyInError] + "..."
	}
	return fmt.Errorf("redis decide %s key %s: %w", c.Algorithm, strconv.Quote(key), err)
}
