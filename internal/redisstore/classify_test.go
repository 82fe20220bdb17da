package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/lua"
)

func TestClassifyError(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"canceled", fmt.Errorf("redis decide: %w", context.Canceled), "canceled"},
		{"deadline", context.DeadlineExceeded, "timeout"},
		{"pool timeout", redis.ErrPoolTimeout, "timeout"},
		{"read timeout", &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, "timeout"},
		{"noscript", redis.ErrNoScript, "noscript"},
		{"refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, "connection"},
		{"eof", fmt.Errorf("redis decide: %w", io.EOF), "connection"},
		{"closed", redis.ErrClosed, "connection"},
		{"loading", errLine("LOADING Redis is loading the dataset in memory"), "connection"},
		{"script error", errLine("ERR user_script:1: Script attempted to access nonexistent global variable"), "script"},
		{"wrong type", errLine("WRONGTYPE Operation against a key holding the wrong kind of value"), "script"},
		{"bad reply", errReply, "script"},
		{"anything else", errors.New("boom"), "other"},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ClassifyError(tt.err)
			if got != tt.want {
				t.Errorf("ClassifyError(%v) = %q, want %q", tt.err, got, tt.want)
			}
			if tt.err != nil && !slices.Contains(ErrorClasses(), got) {
				t.Errorf("ClassifyError(%v) = %q, which ErrorClasses() %q does not list: its series would not start at 0", tt.err, got, ErrorClasses())
			}
			seen[got] = true
		})
	}
	// Every listed class is one ClassifyError returns, so the list names no
	// series that can never move.
	for _, c := range ErrorClasses() {
		if !seen[c] {
			t.Errorf("ErrorClasses() lists %q, which no case above returns", c)
		}
	}
}

// errLine is a server error reply as go-redis returns it.
type errLine string

func (e errLine) Error() string { return string(e) }
func (errLine) RedisError()     {}

func TestArgs(t *testing.T) {
	tests := []struct {
		name string
		call decide.Call
		want []any
	}{
		{
			name: "window with holds",
			call: decide.Call{
				Algorithm:   decide.SlidingWindow,
				Limits:      []decide.Limit{{Requests: 5, Per: time.Second}, {Requests: 100, Per: time.Minute}},
				Cost:        2,
				Penalty:     3 * time.Second,
				Escalations: []decide.Escalation{{Triggers: 4, Within: time.Minute, Penalty: time.Hour}},
				NowMs:       1234,
			},
			want: []any{int64(1234), int64(2), int64(3000), int64(1), int64(4), int64(60_000), int64(3_600_000),
				int64(2), int64(5), int64(1000), int64(100), int64(60_000)},
		},
		{
			name: "token bucket",
			call: decide.Call{
				Algorithm: decide.TokenBucket,
				Limits:    []decide.Limit{{Rate: 10, Per: time.Second, Burst: 20}},
				Cost:      1,
			},
			want: []any{int64(0), int64(1), int64(0), int64(0), int64(1), int64(10), int64(1000), int64(20)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := args(&tt.call)
			if fmt.Sprint(got) != fmt.Sprint(tt.want) || len(got) != len(tt.want) {
				t.Errorf("args = %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("arg %d = %#v, want %#v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

// TestPrepare: a call without penalty or escalations goes to a lean script
// with the state key alone and no hold or escalation arguments; with one
// limit, to the algorithm's one-limit script where there is one.
func TestPrepare(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:0"}) // never used
	defer client.Close()
	store := New(client)
	keys := decide.Keys{State: "s", Hold: "h", Hits: "x"}
	window := []decide.Limit{{Requests: 5, Per: time.Second}}
	bucket := []decide.Limit{{Rate: 10, Per: time.Second, Burst: 20}, {Rate: 100, Per: time.Minute, Burst: 100}}
	tests := []struct {
		name    string
		call    decide.Call
		variant lua.Variant
		keys    []string
		args    []any
	}{
		{"sliding window, one limit", decide.Call{Algorithm: decide.SlidingWindow, Limits: window, Cost: 1},
			lua.OneLimit, []string{"s"}, []any{int64(0), int64(1), int64(5), int64(1000)}},
		{"fixed window, two limits", decide.Call{Algorithm: decide.FixedWindow, Limits: append(window, window[0]), Cost: 1},
			lua.NoHolds, []string{"s"}, []any{int64(0), int64(1), int64(5), int64(1000), int64(5), int64(1000)}},
		{"fixed window, penalty", decide.Call{Algorithm: decide.FixedWindow, Limits: window, Cost: 1, Penalty: time.Second},
			lua.Full, []string{"s", "h", "x"}, []any{int64(0), int64(1), int64(1000), int64(0), int64(1), int64(5), int64(1000)}},
		{"fixed window, escalation", decide.Call{Algorithm: decide.FixedWindow, Limits: window, Cost: 1,
			Escalations: []decide.Escalation{{Triggers: 2, Within: time.Second, Penalty: time.Minute}}},
			lua.Full, []string{"s", "h", "x"}, []any{int64(0), int64(1), int64(0), int64(1), int64(2), int64(1000), int64(60_000), int64(1), int64(5), int64(1000)}},
		{"token bucket, two limits", decide.Call{Algorithm: decide.TokenBucket, Limits: bucket, Cost: 3, NowMs: 77},
			lua.NoHolds, []string{"s"}, []any{int64(77), int64(3), int64(10), int64(1000), int64(20), int64(100), int64(60_000), int64(100)}},
		{"token bucket, two limits, denied calls debited", decide.Call{Algorithm: decide.TokenBucket, Limits: bucket, Cost: 3, NowMs: 77, DebitDenied: true},
			lua.NoHolds, []string{"s"}, []any{int64(77), int64(3), int64(10), int64(1000), int64(20), int64(100), int64(60_000), int64(100)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.call.Keys = keys
			sc := store.prepare(&tt.call)
			if want := store.scriptsOf(&tt.call).of(tt.variant); sc.script == nil || sc.script != want {
				t.Errorf("script is not the %s one", tt.variant)
			}
			if debits := store.scripts[scriptSet{tt.call.Algorithm, lua.DebitDenied}].of(tt.variant) == sc.script; debits != tt.call.DebitDenied {
				t.Errorf("script debits denied calls: %v, want %v", debits, tt.call.DebitDenied)
			}
			keys, args := sc.keysArgs()
			if !slices.Equal(keys, tt.keys) {
				t.Errorf("keys = %v, want %v", keys, tt.keys)
			}
			if !slices.Equal(args, tt.args) {
				t.Errorf("args = %#v, want %#v", args, tt.args)
			}
			// What EVALSHA sends: the same, through pointers.
			var arena []any
			cmd := evalSha(context.Background(), &arena, &sc, redis.NewIntSliceCmd)
			var sent []any
			for _, a := range cmd.Args()[3:] {
				switch v := a.(type) {
				case *string:
					sent = append(sent, *v)
				case *int64:
					sent = append(sent, *v)
				default:
					sent = append(sent, v)
				}
			}
			want := make([]any, 0, len(tt.keys)+len(tt.args))
			for _, k := range tt.keys {
				want = append(want, k)
			}
			want = append(want, tt.args...)
			if !slices.Equal(sent, want) {
				t.Errorf("EVALSHA sends %#v, want %#v", sent, want)
			}
		})
	}
	// a fixed window of one limit without holds is counted, no script
	c := decide.Call{Algorithm: decide.FixedWindow, Keys: keys, Limits: window, Cost: 1}
	if sc := store.prepare(&c); sc.script != nil || sc.counted != &c {
		t.Error("fixed window, one limit: not counted")
	}
	// an algorithm without a one-limit script takes the one without holds
	for _, alg := range []decide.Algorithm{decide.SlidingWindow, decide.SlidingWindowCounter, decide.TokenBucket} {
		c := decide.Call{Algorithm: alg, Keys: keys, Limits: bucket[:1], Cost: 1}
		want := store.scripts[scriptSet{alg: alg}].one
		if want == nil {
			want = store.scripts[scriptSet{alg: alg}].noHolds
		}
		if sc := store.prepare(&c); sc.script != want || sc.lean == nil {
			t.Errorf("%s, one limit: not its leanest script", alg)
		}
	}
}
