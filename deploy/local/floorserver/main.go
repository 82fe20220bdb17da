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
	"syscall"
	"time"

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
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *answerFile == "" {
		fmt.Fprintln(stderr, "floorserver: -answer is required")
		return 2
	}
	f, err := os.Open(*answerFile)
	if err != nil {
		fmt.Fprintf(stderr, "floorserver: %v\n", err)
		return 2
	}
	a, err := readAnswer(f)
	_ = f.Close()
	if err != nil {
		fmt.Fprintf(stderr, "floorserver: %s: %v\n", *answerFile, err)
		return 2
	}
	l := &ops.Listener{Var: "-listen", Addr: *listen, Fast: a.serve, Log: zap.NewNop()}
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
