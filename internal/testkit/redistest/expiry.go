package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// expiryGuard fails the test when a command sets an absolute expiry
// (PEXPIREAT, EXPIREAT, SET or GETEX with PXAT or EXAT) at an instant that
// has passed: Redis deletes such a key at once, so the test asserts on
// nothing, or fails only once the calendar has moved past a hard-coded date.
// Instants handed to Redis must be derived from the current time.
type expiryGuard struct {
	tb  testing.TB
	now func() time.Time
}

// guardExpiries installs the guard on a client the tests hand out.
func guardExpiries(tb testing.TB, c interface{ AddHook(redis.Hook) }) {
	c.AddHook(expiryGuard{tb: tb, now: time.Now})
}

func (g expiryGuard) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g expiryGuard) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		g.check(cmd)
		return next(ctx, cmd)
	}
}

func (g expiryGuard) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			g.check(cmd)
		}
		return next(ctx, cmds)
	}
}

func (g expiryGuard) check(cmd redis.Cmder) {
	at, ok := absoluteExpiry(cmd.Args())
	if ok && !at.After(g.now()) {
		// Errorf, not Fatalf: the hook may run on a goroutine of the code
		// under test.
		g.tb.Errorf("redis %s sets an absolute expiry at %s, which has passed: derive instants handed to Redis from the current time",
			cmd.Name(), at.UTC().Format(time.RFC3339Nano))
	}
}

// absoluteExpiry is the instant a command's arguments set a key to expire
// at, if they set one.
func absoluteExpiry(args []any) (time.Time, bool) {
	if len(args) < 3 {
		return time.Time{}, false
	}
	name := strings.ToLower(fmt.Sprint(args[0]))
	switch name {
	case "pexpireat":
		return instant(args[2], time.Millisecond)
	case "expireat":
		return instant(args[2], time.Second)
	case "set", "getex":
		for i := 2; i+1 < len(args); i++ {
			switch strings.ToLower(fmt.Sprint(args[i])) {
			case "pxat":
				return instant(args[i+1], time.Millisecond)
			case "exat":
				return instant(args[i+1], time.Second)
			}
		}
	}
	return time.Time{}, false
}

func instant(arg any, unit time.Duration) (time.Time, bool) {
	n, err := strconv.ParseInt(fmt.Sprint(arg), 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(n * int64(unit/time.Millisecond)), true
}
