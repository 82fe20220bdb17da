package redisstore

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// scriptCall is one call of a script: the script (nil: not sent), its KEYS
// and its ARGV.
type scriptCall struct {
	script *redis.Script
	keys   []string
	args   []any
}

// runScripts runs calls in one round trip, by digest (EVALSHA), pipelined
// when there are several, and runs again with EVAL, in a second round trip,
// the calls whose server lacked their script (restart, SCRIPT FLUSH, a new
// or promoted cluster node): on a cluster only those of the nodes that
// lacked it, and the first EVAL caches it there. A call without a script is
// not sent and gets a nil command. Errors are read per command.
func runScripts(ctx context.Context, client redis.UniversalClient, calls []scriptCall) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	if len(calls) == 1 {
		if c := &calls[0]; c.script != nil {
			cmds[0] = c.script.Run(ctx, client, c.keys, c.args...) // EVALSHA, then EVAL on NOSCRIPT
		}
		return cmds
	}
	pipe := client.Pipeline()
	for i := range calls {
		if c := &calls[i]; c.script != nil {
			cmds[i] = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
		}
	}
	if pipe.Len() == 0 {
		return cmds
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	var missing []int
	for i, cmd := range cmds {
		if cmd != nil && isNoScript(cmd.Err()) {
			missing = append(missing, i)
		}
	}
	switch len(missing) {
	case 0:
	case 1:
		c := &calls[missing[0]]
		cmds[missing[0]] = c.script.Eval(ctx, client, c.keys, c.args...)
	default:
		pipe := client.Pipeline()
		for _, i := range missing {
			c := &calls[i]
			cmds[i] = c.script.Eval(ctx, pipe, c.keys, c.args...)
		}
		_, _ = pipe.Exec(ctx)
	}
	return cmds
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}
