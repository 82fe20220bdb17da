// Command floorserver is the decision port without the decisions: the
// limiter's fasthttp server (ops.Listener, the same settings) answering
// every request with one recorded answer of the limiter's, the same status,
// headers and body, with no rule, no Redis and no event behind it. make
// bench drives it as it drives the limiter, so that the HTTP server's own
// cost on the machine (its CPU per request, its throughput, its tail at a
// given rate) stands beside the limiter's: what no decision service on that
// server can go below (deploy/local/bench.sh).
//
//	floorserver -listen 127.0.0.1:18090 -answer answer.http
//
// answer.http is a response as `curl -si` prints it: the status line, the
// headers, a blank line and the body. It stops on SIGINT or SIGTERM.
//
// With -redis host:port each request first sends Redis what a counted
// fixed window sends, INCRBY and PEXPIRE on one of -keys keys under
// -prefix, in one round trip of its own from its own goroutine: a Redis
// leg with no coalescing, no decision and no event, what the simplest
// Redis-backed limiter pays per request.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/ops"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

// run serves until ctx ends; the exit code is 2 for bad arguments, 1 when
// it cannot serve.
func run(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("floorserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:18090", "address to serve on")
	answerFile := fs.String("answer", "", "the answer to give, as `curl -si` prints it (required)")
	redisAddr := fs.String("redis", "", "host:port: count each request in Redis first (INCRBY + PEXPIRE)")
	prefix := fs.String("prefix", "floor:", "with -redis, the prefix of the keys counted")
	keys := fs.Uint64("keys", 10000, "with -redis, how many keys the requests are spread over")
	conns := fs.Int("redis-conns", 64, "with -redis, connections to Redis (one round trip each at a time)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *keys == 0 || *conns < 1 {
		fmt.Fprintln(stderr, "floorserver: -keys and -redis-conns must be at least 1")
		return 2
	}
	if *answerFile == "" {
		fmt.Fprintln(stderr, "floorserver: -answer is required")
		return 2
	}
	a, err := loadAnswer(*answerFile)
	if err != nil {
		fmt.Fprintf(stderr, "floorserver: %v\n", err)
		return 2
	}
	handler := a.serve
	if *redisAddr != "" {
		rdb := redis.NewClient(&redis.Options{Addr: *redisAddr, PoolSize: *conns, MinIdleConns: *conns})
		defer rdb.Close()
		handler = (&counter{rdb: rdb, prefix: *prefix, keys: *keys}).before(a.serve)
	}
	l := &ops.Listener{Var: "-listen", Addr: *listen, Fast: handler, Log: zap.NewNop()}
	if err := l.Listen(ctx); err != nil {
		fmt.Fprintf(stderr, "floorserver: %v\n", err)
		return 1
	}
	served := make(chan error, 1)
	go func() { served <- l.Serve(ctx) }()
	select {
	case err = <-served:
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = errors.Join(l.Shutdown(shutdown), <-served)
		cancel()
	}
	if err != nil {
		fmt.Fprintf(stderr, "floorserver: %v\n", err)
		return 1
	}
	return 0
}

// answer is one recorded response.
type answer struct {
	status int
	header [][2]string // but Date and Content-Length, which are the server's
	body   []byte
}

// maxAnswer bounds the recorded body: a decision's answer is a few hundred
// bytes.
const maxAnswer = 64 << 10

// loadAnswer reads the answer file at path.
func loadAnswer(path string) (*answer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	a, err := readAnswer(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return a, nil
}

// readAnswer parses a response as `curl -si` prints it.
func readAnswer(r io.Reader) (*answer, error) {
	res, err := http.ReadResponse(bufio.NewReader(r), nil)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, maxAnswer+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxAnswer {
		return nil, fmt.Errorf("body longer than %d bytes", maxAnswer)
	}
	a := &answer{status: res.StatusCode, body: body}
	for name, values := range res.Header {
		if name == "Date" || name == "Content-Length" {
			continue
		}
		for _, v := range values {
			a.header = append(a.header, [2]string{name, v})
		}
	}
	return a, nil
}

// serve answers as the limiter's handler does: the request read whole
// (fasthttp reads the body before the handler runs), then each header set
// on fasthttp's reused response header and the body.
func (a *answer) serve(ctx *fasthttp.RequestCtx) {
	ctx.SetStatusCode(a.status)
	for _, h := range a.header {
		ctx.Response.Header.Set(h[0], h[1])
	}
	ctx.SetBody(a.body)
}

// counter sends each request's INCRBY and PEXPIRE, as a counted fixed
// window does, on the next of keys keys.
type counter struct {
	rdb    *redis.Client
	prefix string
	keys   uint64
	next   atomic.Uint64
}

// before counts each request, then hands it to next; a request Redis did
// not count is answered 503.
func (c *counter) before(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		if err := c.count(ctx); err != nil {
			ctx.Error(err.Error(), fasthttp.StatusServiceUnavailable)
			return
		}
		next(ctx)
	}
}

func (c *counter) count(ctx context.Context) error {
	key := c.prefix + strconv.FormatUint(c.next.Add(1)%c.keys, 10)
	pipe := c.rdb.Pipeline()
	pipe.IncrBy(ctx, key, 1)
	pipe.PExpire(ctx, key, time.Minute)
	_, err := pipe.Exec(ctx)
	return err
}
