package redisabuse

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/redisstore"
	"github.com/ratewarden/ratewarden/lua"
)

// Distinct is the detector's sets of distinct members in Redis
// (abuse.Distinct), run by lua/detect_distinct.lua: state survives a
// detector restart and is shared by every detector instance. It is safe
// for concurrent use.
//
// A set's keys are P{det|<scope>|<hash>}:d:<name>:m (members),
// …:d:<name>:i (introducers, and the last crossing), …:d:<name>:g (groups,
// for adds with one) and …:d:<name>:t (trusted members), under the
// offender's hash tag (that of Windows and Ledger), so each set lives in a
// single Redis Cluster slot. They expire after twice the window plus the
// grace without a sighting (the trusted members, without a trust).
type Distinct struct {
	client redis.UniversalClient
	prefix string
	script *redis.Script
	// bySlot: a script call holds the adds of one offender only (Redis
	// Cluster); otherwise those of any offenders.
	bySlot bool
	// perCall bounds the adds of one call (addsPerCall; tests lower it).
	perCall int
}

// addsPerCall bounds the adds of one script call: enough that the cost of
// a call is shared, few enough that Redis is never busy with one call for
// long.
const addsPerCall = 32

// NewDistinct returns the sets stored under the key prefix (which must not
// contain '{' or '}', as it precedes the hash tag).
func NewDistinct(client redis.UniversalClient, prefix string) *Distinct {
	_, cluster := client.(*redis.ClusterClient)
	return &Distinct{client: client, prefix: prefix, script: redis.NewScript(lua.DetectDistinct()), bySlot: cluster,
		perCall: addsPerCall}
}

// Add records the adds in one round trip and returns their counts, with
// the semantics of abusetest.MemoryDistinct. The adds go in script calls
// of up to addsPerCall adds each, pipelined; on Redis Cluster a call holds
// the adds of one offender. A set's adds keep their order: they are in one
// call, or in calls that run in order on its node. Dropping sightings
// later than the grace is the caller's business.
func (d *Distinct) Add(ctx context.Context, adds []abuse.DistinctAdd) ([]abuse.DistinctCount, error) {
	if len(adds) == 0 {
		return nil, nil
	}
	bases := make([]string, len(adds))
	for i := range adds {
		if err := validateAdd(&adds[i]); err != nil {
			return nil, fmt.Errorf("redis add distinct: add %d: %w", i, err)
		}
		bases[i] = offenderTag(d.prefix, adds[i].Set.Offender)
	}
	groups := d.group(bases)
	calls := make([]redisstore.EvalCall, len(groups))
	for g, idx := range groups {
		calls[g] = d.call(adds, bases, idx)
	}
	cmds := redisstore.EvalPipelined(ctx, d.client, calls)
	out := make([]abuse.DistinctCount, len(adds))
	for g, cmd := range cmds {
		if err := parseDistinct(cmd, groups[g], out); err != nil {
			i := groups[g][0]
			return nil, fmt.Errorf("redis add distinct: add %d (event %.64q): %w", i, adds[i].EventID, err)
		}
	}
	return out, nil
}

// group returns the indexes of the adds of each script call, in order.
func (d *Distinct) group(bases []string) [][]int {
	var groups [][]int
	if !d.bySlot {
		for i := 0; i < len(bases); i += d.perCall {
			idx := make([]int, min(d.perCall, len(bases)-i))
			for j := range idx {
				idx[j] = i + j
			}
			groups = append(groups, idx)
		}
		return groups
	}
	open := make(map[string]int) // offender tag -> its group still open
	for i, b := range bases {
		g, ok := open[b]
		if !ok || len(groups[g]) == d.perCall {
			g = len(groups)
			groups = append(groups, nil)
			open[b] = g
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

func (d *Distinct) call(adds []abuse.DistinctAdd, bases []string, idx []int) redisstore.EvalCall {
	keys := make([]string, 0, 4*len(idx))
	args := make([]any, 0, 11*len(idx))
	flag := func(b bool) int64 {
		if b {
			return 1
		}
		return 0
	}
	for _, i := range idx {
		a := &adds[i]
		base := bases[i] + ":d:" + a.Set.Name
		ttl := max(2*(a.Spec.Window+a.Spec.Grace), time.Second)
		keys = append(keys, base+":m", base+":i", base+":g", base+":t")
		args = append(args, a.TS.UnixMilli(), a.Member, a.EventID, a.Spec.Window.Milliseconds(), a.Spec.Cap,
			a.Spec.Threshold, int64(a.Spec.Samples), flag(a.Spec.AllOnCross), ttl.Milliseconds(), a.Group, flag(a.Trust))
	}
	return redisstore.EvalCall{Script: d.script, Keys: keys, Args: args}
}

func validateAdd(a *abuse.DistinctAdd) error {
	if err := validateScope(a.Set.Offender.Scope); err != nil {
		return err
	}
	switch {
	case a.Set.Name == "" || strings.ContainsAny(a.Set.Name, "{}:"):
		return fmt.Errorf("set name %.32q is empty or holds '{', '}' or ':'", a.Set.Name)
	case a.Member == "":
		return fmt.Errorf("empty member")
	case a.Spec.Window <= 0 || a.Spec.Grace < 0 || a.Spec.Samples < 0:
		return fmt.Errorf("distinct spec: window not positive, or negative grace or samples")
	case a.Spec.Cap < 1:
		return fmt.Errorf("distinct spec: cap %d is not positive", a.Spec.Cap)
	}
	return nil
}

// parseDistinct reads the reply of detect_distinct.lua to the adds idx
// into out.
func parseDistinct(cmd *redis.Cmd, idx []int, out []abuse.DistinctCount) error {
	v, err := cmd.Result()
	if err != nil {
		return err
	}
	vals, ok := v.([]any)
	if !ok {
		return errReply
	}
	for _, i := range idx {
		var n [7]int64
		if len(vals) < len(n) {
			return errReply
		}
		for j := range n {
			if n[j], ok = vals[j].(int64); !ok {
				return errReply
			}
		}
		c := abuse.DistinctCount{Newest: msTime(n[0]), Count: n[1], Introduced: n[2] == 1, Crossed: n[3] == 1,
			First: msTime(n[4]), Last: msTime(n[5]), Trusted: n[6] == 1}
		vals = vals[len(n):]
		if c.Members, vals, err = parseNames(vals); err != nil {
			return err
		}
		if c.Spared, vals, err = parseNames(vals); err != nil {
			return err
		}
		out[i] = c
	}
	if len(vals) != 0 {
		return errReply
	}
	return nil
}

// parseNames reads a count and as many names off vals: nil when the count
// is 0.
func parseNames(vals []any) (names []string, rest []any, err error) {
	if len(vals) == 0 {
		return nil, nil, errReply
	}
	n, ok := vals[0].(int64)
	if !ok || n < 0 || n > int64(len(vals)-1) {
		return nil, nil, errReply
	}
	if n > 0 {
		names = make([]string, n)
	}
	for j := range names {
		if names[j], ok = vals[1+j].(string); !ok {
			return nil, nil, errReply
		}
	}
	return names, vals[1+n:], nil
}
