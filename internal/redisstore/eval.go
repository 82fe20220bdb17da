package redisstore

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// EvalCall is one call of a script by EvalPipelined: the script, its KEYS
// and its ARGV.
type EvalCall struct {
	Script *redis.Script
	Keys   []string
	Args   []any
}

// EvalPipelined runs calls as the Store runs its own: in one round trip,
// by digest (EVALSHA), pipelined when there are several, then again with
// EVAL, in a second round trip, the calls whose server lacked their script
// (restart, SCRIPT FLUSH, a new or promoted cluster node): on a cluster
// only those of the nodes that lacked it, and the first EVAL caches it
// there. It returns one command per call (every call has a script), whose
// generic reply or error is read per command. It is for the scripts of the
// other Redis adapters (package redisabuse's windows), which need the same
// round trips.
func EvalPipelined(ctx context.Context, client redis.UniversalClient, calls []EvalCall) []*redis.Cmd {
	sc := make([]scriptCall, len(calls))
	for i, c := range calls {
		sc[i] = scriptCall{script: c.Script, keys: c.Keys, args: c.Args}
	}
	return runScriptReplies(ctx, client, sc)
}
