package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// WarmUp readies the client so that the first decisions cost one round
// trip, as later ones do: every primary answers, holds every script and has
// conns connections open in the client's pool, which a client made by
// Connect uses for pipelines too (a connection dialed on demand costs a
// dial and two more round trips: HELLO, CLIENT SETINFO). On
// a cluster it also loads the slot map and go-redis's command table, which
// go-redis otherwise fetches (COMMAND, about 50 KB) in front of the first
// single command it routes, within that command's deadline. The replicas
// the slot map lists get the scripts too, for their promotion (Redis 7
// lists a new replica only once it has replicated); one that does not
// answer is no failure. WarmUp may be called again after a failure; ctx
// bounds it.
func (s *Store) WarmUp(ctx context.Context, conns int) error {
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		return s.warmCluster(ctx, c, conns)
	case *redis.Client: // a single server, or a primary found through Sentinel
		return s.warmNode(ctx, c, "", conns)
	default:
		return s.Load(ctx)
	}
}

// WarmUpThrough is WarmUp for a Redis that may answer later than the
// decisions' timeout: slow, not down. control is a client of the same
// Redis whose timeout is longer (REDIS_CHECK_TIMEOUT); every round trip the
// warm-up needs goes through it: the scripts (cached by the server, for
// every client), the clock samples, and on a cluster the slot map. The
// decisions' pool is then filled as WarmUp does, but a connection whose
// ping came back past the decisions' timeout is no failure: Redis
// answered, and the pool dials it again when a decision needs it.
func (s *Store) WarmUpThrough(ctx context.Context, control redis.UniversalClient, conns int) error {
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		ctl, ok := control.(*redis.ClusterClient)
		if !ok {
			return s.warmCluster(ctx, c, conns)
		}
		err := ctl.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			if err := s.loadNode(ctx, node, node.Options().Addr); err != nil {
				return fmt.Errorf("primary %s: %w", node.Options().Addr, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
		_ = ctl.ForEachSlave(ctx, func(ctx context.Context, node *redis.Client) error { return s.loadScripts(ctx, node) })
		// The decisions' client loads its own slot map and command table.
		if err := c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return dialLate(ctx, node, conns) }); err != nil {
			return err
		}
		return s.loadCommandTable(ctx, c)
	case *redis.Client:
		ctl, ok := control.(*redis.Client)
		if !ok {
			return s.warmNode(ctx, c, "", conns)
		}
		if err := s.loadNode(ctx, ctl, ""); err != nil {
			return err
		}
		return dialLate(ctx, c, conns)
	default:
		return s.Load(ctx)
	}
}

// loadNode caches every script on one server and samples its clock.
func (s *Store) loadNode(ctx context.Context, node *redis.Client, addr string) error {
	if err := s.loadScripts(ctx, node); err != nil {
		return err
	}
	if err := s.clocks.of(addr).sampleNode(ctx, node); err != nil {
		return fmt.Errorf("redis clock: %w", err)
	}
	return nil
}

// dialLate is dial, where a ping that timed out is no failure.
func dialLate(ctx context.Context, node *redis.Client, n int) error {
	if err := dial(ctx, node, n); err != nil && ClassifyError(err) != "timeout" {
		return err
	}
	return nil
}

func (s *Store) warmCluster(ctx context.Context, c *redis.ClusterClient, conns int) error {
	// ForEachMaster loads the slot map first.
	err := c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		if err := s.warmNode(ctx, node, node.Options().Addr, conns); err != nil {
			return fmt.Errorf("primary %s: %w", node.Options().Addr, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	_ = c.ForEachSlave(ctx, func(ctx context.Context, node *redis.Client) error { return s.loadScripts(ctx, node) })
	return s.loadCommandTable(ctx, c)
}

// warmNode opens conns connections to one server, pinging on each, caches
// every script on it and samples its clock, the clock of addr ("" for a
// single server) that counted calls read.
func (s *Store) warmNode(ctx context.Context, node *redis.Client, addr string, conns int) error {
	if err := dial(ctx, node, conns); err != nil {
		return err
	}
	if err := s.loadScripts(ctx, node); err != nil {
		return err
	}
	if err := s.clocks.of(addr).sampleNode(ctx, node); err != nil {
		return fmt.Errorf("redis clock: %w", err)
	}
	return nil
}

// dial makes node's pool hold at least n open connections: each Conn keeps
// the connection it first uses until closed, so n of them held together
// use n different ones, which Close returns to the pool.
func dial(ctx context.Context, node *redis.Client, n int) error {
	held := make([]*redis.Conn, 0, max(n, 1))
	defer func() {
		for _, cn := range held {
			_ = cn.Close()
		}
	}()
	for range max(n, 1) {
		cn := node.Conn()
		held = append(held, cn)
		if err := cn.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("redis ping: %w", err)
		}
	}
	return nil
}

// loadScripts caches every script on one server, or on every node of a
// cluster client (go-redis sends SCRIPT LOAD to each).
func (s *Store) loadScripts(ctx context.Context, c redis.Scripter) error {
	for _, sc := range []*redis.Script{clockScript, giveBackScript, holdScript} {
		if err := sc.Load(ctx, c).Err(); err != nil {
			return fmt.Errorf("redis script load: %w", err)
		}
	}
	for _, a := range s.scripts {
		for _, sc := range a.all() {
			if err := sc.Load(ctx, c).Err(); err != nil {
				return fmt.Errorf("redis script load: %w", err)
			}
		}
	}
	return nil
}

// errNoCommandTable means go-redis's fetch of the command table kept
// failing until the warm-up's deadline.
var errNoCommandTable = errors.New("redis command table not loaded")

// loadCommandTable routes single commands through the cluster client until
// go-redis has its command table: the fetch is made with a node's read
// timeout (REDIS_TIMEOUT), so on a busy host it can time out, and go-redis
// then tries again in front of the next single command.
func (s *Store) loadCommandTable(ctx context.Context, c *redis.ClusterClient) error {
	for {
		fetches := s.commands.fetches.Load()
		if err := c.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("redis ping: %w", err)
		}
		// No fetch at all: go-redis had the table before this ping.
		if s.commands.loaded.Load() || s.commands.fetches.Load() == fetches {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", errNoCommandTable, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// commandTable watches a cluster client's nodes for go-redis's fetches of
// the command table (a bare COMMAND, which nothing else sends) and records
// whether one succeeded: go-redis keeps the table once it has it.
type commandTable struct {
	fetches atomic.Int64
	loaded  atomic.Bool
}

// watch adds the watching hook to every node c creates from now on.
func (w *commandTable) watch(c *redis.ClusterClient) {
	c.OnNewNode(func(node *redis.Client) { node.AddHook(w) })
}

func (w *commandTable) DialHook(next redis.DialHook) redis.DialHook { return next }

func (w *commandTable) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (w *commandTable) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if len(cmd.Args()) == 1 && cmd.Name() == "command" {
			w.fetches.Add(1)
			if err == nil {
				w.loaded.Store(true)
			}
		}
		return err
	}
}
