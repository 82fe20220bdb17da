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
// …:d:<name>:i (introducers) and …:d:<name>:x (newest time, last
// crossing), under the offender's hash tag (that of Windows and Ledger), so
// each script touches a single Redis Cluster slot. They expire after twice
// the window plus the grace without a sighting.
type Distinct struct {
	client redis.UniversalClient
	prefix string
	script *redis.Script
}

// NewDistinct returns the sets stored under the key prefix (which must not
// contain '{' or '}', as it precedes the hash tag).
func NewDistinct(client redis.UniversalClient, prefix string) *Distinct {
	return &Distinct{client: client, prefix: prefix, script: redis.NewScript(lua.DetectDistinct())}
}

// Add records the adds in one round trip (a pipeline of one script call per
// add, in order) and returns their counts, with the semantics of
// abusetest.MemoryDistinct. Dropping sightings later than the grace is the
// caller's business.
func (d *Distinct) Add(ctx context.Context, adds []abuse.DistinctAdd) ([]abuse.DistinctCount, error) {
	if len(adds) == 0 {
		return nil, nil
	}
	calls := make([]redisstore.EvalCall, len(adds))
	for i := range adds {
		if err := validateAdd(&adds[i]); err != nil {
			return nil, fmt.Errorf("redis add distinct: add %d: %w", i, err)
		}
		calls[i] = d.call(&adds[i])
	}
	cmds := redisstore.EvalPipelined(ctx, d.client, calls)
	out := make([]abuse.DistinctCount, len(cmds))
	for i, cmd := range cmds {
		c, err := parseDistinct(cmd)
		if err != nil {
			return nil, fmt.Errorf("redis add distinct: add %d (event %.64q): %w", i, adds[i].EventID, err)
		}
		out[i] = c
	}
	return out, nil
}

func (d *Distinct) call(a *abuse.DistinctAdd) redisstore.EvalCall {
	base := offenderTag(d.prefix, a.Set.Offender) + ":d:" + a.Set.Name
	all := int64(0)
	if a.Spec.AllOnCross {
		all = 1
	}
	ttl := max(2*(a.Spec.Window+a.Spec.Grace), time.Second)
	return redisstore.EvalCall{Script: d.script, Keys: []string{base + ":m", base + ":i", base + ":x"},
		Args: []any{a.TS.UnixMilli(), a.Member, a.EventID, a.Spec.Window.Milliseconds(), a.Spec.Cap,
			a.Spec.Threshold, int64(a.Spec.Samples), all, ttl.Milliseconds()}}
}

func validateAdd(a *abuse.DistinctAdd) error {
	if err := validateScope(a.Set.Offender.Scope); err != nil {
		return err
	}
	switch {
	case a.Set.Name == "" || strings.ContainsAny(a.Set.Name, "{}:"):
		return fmt.Errorf("set name %.32q is empty or holds '{', '}' or ':'", a.Set.Name)
	case a.Spec.Window <= 0 || a.Spec.Grace < 0 || a.Spec.Samples < 0:
		return fmt.Errorf("distinct spec: window not positive, or negative grace or samples")
	case a.Spec.Cap < 1:
		return fmt.Errorf("distinct spec: cap %d is not positive", a.Spec.Cap)
	}
	return nil
}

// parseDistinct reads the reply of detect_distinct.lua.
func parseDistinct(cmd *redis.Cmd) (abuse.DistinctCount, error) {
	v, err := cmd.Result()
	if err != nil {
		return abuse.DistinctCount{}, err
	}
	vals, ok := v.([]any)
	if !ok || len(vals) < 7 {
		return abuse.DistinctCount{}, errReply
	}
	var n [7]int64
	for i := range n {
		if n[i], ok = vals[i].(int64); !ok {
			return abuse.DistinctCount{}, errReply
		}
	}
	if n[6] != int64(len(vals)-7) {
		return abuse.DistinctCount{}, errReply
	}
	c := abuse.DistinctCount{Newest: msTime(n[0]), Count: n[1], Introduced: n[2] == 1, Crossed: n[3] == 1,
		First: msTime(n[4]), Last: msTime(n[5])}
	if n[6] > 0 {
		c.Members = make([]string, n[6])
	}
	for i := range c.Members {
		if c.Members[i], ok = vals[7+i].(string); !ok {
			return abuse.DistinctCount{}, errReply
		}
	}
	return c, nil
}
