package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/testkit/decidetest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// redisAddr is the shared Redis the integration tests run against
// (REDIS_URL, or the local default).
func redisAddr() string {
	opts, err := redis.ParseURL(redistest.URL())
	if err != nil {
		panic("REDIS_URL: " + err.Error())
	}
	return opts.Addr
}

func newClient(tb testing.TB, addr string) *redis.Client {
	tb.Helper()
	if addr == redisAddr() {
		redistest.Require(tb) // the shared Redis: skipped when it does not answer
	}
	client := redis.NewClient(&redis.Options{Addr: addr})
	tb.Cleanup(func() { client.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		tb.Fatalf("redis at %s: %v", addr, err)
	}
	return client
}

// testPrefix returns a random key prefix whose keys are deleted at cleanup:
// the Redis is shared.
func testPrefix(tb testing.TB, client *redis.Client) string {
	return redistest.Prefix(tb, client)
}

// digests returns the SHA1 digests of store's scripts.
func digests(store *Store) []string {
	shas := []string{clockScript.Hash(), giveBackScript.Hash(), holdScript.Hash()}
	for _, a := range store.scripts {
		for _, sc := range a.all() {
			shas = append(shas, sc.Hash())
		}
	}
	return shas
}

// stepScenario decides the steps of s on keys one at a time with decideFn
// and through a fresh model: each result must be the step's and the
// model's.
func stepScenario(t *testing.T, s decidetest.Scenario, keys decide.Keys, decideFn func(decide.Call) (decide.Result, error)) {
	t.Helper()
	model := decide.NewMemory()
	for i, step := range s.Steps {
		c := s.Call(keys, i)
		got, err := decideFn(c)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got != step.Want {
			t.Errorf("step %d (now %d, cost %d): redis\n got  %+v\n want %+v", i, step.NowMs, step.Cost, got, step.Want)
		}
		if ref := model.Decide(c, 0); got != ref {
			t.Errorf("step %d (now %d, cost %d): redis and model differ\n redis %+v\n model %+v", i, step.NowMs, step.Cost, got, ref)
		}
	}
}

// decideOne decides c alone with store.Decide.
func decideOne(ctx context.Context, store *Store) func(decide.Call) (decide.Result, error) {
	return func(c decide.Call) (decide.Result, error) {
		r, err := store.Decide(ctx, []decide.Call{c})
		if err != nil {
			return decide.Result{}, err
		}
		return r[0], nil
	}
}
