// Command loadgen sends POST /v1/check traffic to a limiter and measures
// throughput, latency and verdicts: closed loop (-workers connections
// sending back to back) or open loop (-rate requests per second, latency
// counted from each request's due time), over a mix of normal clients and
// attackers. It is built to cost the machine little per request, since on
// a small box it shares the CPU with the server it measures: raw keep-alive
// connections, requests built in place, no allocation per request.
//
// With -protocol grpc the same traffic goes to Envoy's rate limit service
// (ShouldRateLimit) instead, over a few HTTP/2 connections as Envoy sends
// it, with the request messages reused by each worker; with -protocol json
// to envoyproxy/ratelimit's POST /json, over keep-alive HTTP/1.1 as for
// /v1/check, so that the limiter and envoyproxy/ratelimit can be measured
// side by side over HTTP too. With -batch N each request carries N checks
// to POST /v1/check/batch, and every check counts as a request.
//
// Exit status: 0 when the run went well, 1 when the limiter cannot be
// reached or the error ratio exceeds -max-errors, 2 for usage errors.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ratewarden/ratewarden/internal/buildinfo"
)

func main() {
	if buildinfo.Handle(os.Args[1:], os.Stdout, "loadgen") {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// usageError is a bad command line: exit status 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// exitCode reports err on stderr and maps it to the exit status.
func exitCode(err error, stderr io.Writer) int {
	var usage *usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &usage):
		if !errors.Is(err, errFlagParse) { // the flag package has said it already
			fmt.Fprintln(stderr, "loadgen:", err)
		}
		return 2
	default:
		fmt.Fprintln(stderr, "loadgen:", err)
		return 1
	}
}

// run sends the load the flags describe until the end of the run or ctx,
// then writes the summary to stdout (and -summary-file). Progress lines go
// to stderr. Loadgen is a command-line tool: flags only, no environment.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stdout, stderr)
	if err != nil {
		return err
	}
	if err := probe(ctx, cfg); err != nil {
		return err
	}

	// The schedule is of requests: -rate and -requests count checks.
	sched := newSchedule(time.Now(), cfg.warmup, cfg.duration, divUp(cfg.requests, uint64(cfg.batch)), cfg.rate/float64(cfg.batch))
	// Requests in flight at the end may finish within the grace period;
	// then they are cut, and not counted.
	runCtx, cancel := context.WithDeadline(ctx, sched.end.Add(min(cfg.timeout, time.Second)))
	defer cancel()
	traffic := NewTraffic(cfg.traffic)
	senders, closeSenders, err := newSenders(&cfg)
	if err != nil {
		return err
	}
	defer closeSenders()
	col := &collector{last: sched.start}
	for i, s := range senders {
		col.workers = append(col.workers, newWorker(i, cfg.seed, sched, traffic, s, cfg.batch))
	}
	var workers sync.WaitGroup
	for _, w := range col.workers {
		workers.Go(func() { w.run(runCtx) })
	}
	stopProgress := make(chan struct{})
	var progress sync.WaitGroup
	if cfg.progress > 0 {
		progress.Go(func() { reportProgress(stopProgress, cfg.progress, col, sched, stderr) })
	}
	workers.Wait()
	finished := time.Now()
	close(stopProgress)
	progress.Wait()
	col.collect(finished)
	if finished.After(sched.end) {
		finished = sched.end // what ran over belongs to the requests in flight, not to the measurement
	}

	s := &summary{
		protocol:    cfg.protocol,
		url:         cfg.url(),
		domain:      cfg.domain,
		workers:     cfg.workers,
		batch:       cfg.batch,
		conns:       cfg.conns(),
		rate:        cfg.rate,
		elapsed:     max(0, finished.Sub(sched.measure)),
		warmup:      cfg.warmup,
		interrupted: ctx.Err() != nil,
		mix:         cfg.traffic.Mix,
		t:           &col.total,
	}
	if err := s.writeText(stdout); err != nil {
		return err
	}
	if cfg.summaryFile != "" {
		if err := writeSummaryFile(cfg.summaryFile, s); err != nil {
			return err
		}
	}
	return verdict(cfg, s)
}

// newSenders returns one sender per worker, and what closes what they
// share once the workers are done.
func newSenders(cfg *config) ([]sender, func(), error) {
	senders := make([]sender, cfg.workers)
	if cfg.protocol == protocolGRPC {
		conns, err := dialGRPC(cfg.grpcAddr, cfg.conns(), cfg.timeout)
		if err != nil {
			return nil, nil, fmt.Errorf("-grpc-addr %s: %w", cfg.grpcAddr, err)
		}
		for i := range senders {
			senders[i] = newGRPCSender(conns[i%len(conns)], cfg)
		}
		return senders, func() { closeGRPC(conns) }, nil
	}
	builders := make([]requestBuilder, len(cfg.targets))
	for i, t := range cfg.targets {
		builders[i] = newRequestBuilder(t)
	}
	for i := range senders {
		builder := builders[i%len(builders)]
		cl := newClient(cfg.targets[i%len(cfg.targets)].addr, cfg.timeout)
		switch {
		case cfg.protocol == protocolJSON:
			senders[i] = newJSONSender(builder, cl, newRLSJSON(cfg.domain, cfg.entries))
		case cfg.batch > 1:
			senders[i] = newBatchSender(builder, cl)
		default:
			senders[i] = newHTTPSender(builder, cl)
		}
	}
	return senders, func() {}, nil
}

// addr is the limiter's address to dial; flag names it on the command
// line, for messages.
func (cfg *config) addr() (addr, flag string) {
	if cfg.protocol == protocolGRPC {
		return cfg.grpcAddr, "-grpc-addr " + cfg.grpcAddr
	}
	return cfg.target.addr, "-url " + cfg.rawURL
}

// url names the target in the summary.
func (cfg *config) url() string {
	if cfg.protocol == protocolGRPC {
		return "grpc://" + cfg.grpcAddr + shouldRateLimit
	}
	urls := make([]string, len(cfg.targets))
	for i, t := range cfg.targets {
		urls[i] = "http://" + t.host + t.path
	}
	return strings.Join(urls, ",")
}

// conns is the number of connections: one per worker over HTTP, at most
// one per worker over gRPC.
func (cfg *config) conns() int {
	if cfg.protocol == protocolGRPC {
		return min(cfg.grpcConns, cfg.workers)
	}
	return cfg.workers
}

// divUp is n ÷ d rounded up.
func divUp(n, d uint64) uint64 { return (n + d - 1) / d }

// probe fails when no connection to the limiter can be opened: nothing
// would be measured.
func probe(ctx context.Context, cfg config) error {
	addr, flag := cfg.addr()
	addrs := []string{addr}
	if cfg.protocol != protocolGRPC {
		addrs = addrs[:0]
		for _, t := range cfg.targets {
			addrs = append(addrs, t.addr)
		}
	}
	d := net.Dialer{Timeout: min(cfg.timeout, 3*time.Second)}
	for _, addr := range addrs {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return fmt.Errorf("cannot reach the limiter at %s (%s): %w", addr, flag, err)
		}
		conn.Close()
	}
	return nil
}

// verdict is the run's error, if any: no answer at all, or too many errors.
func verdict(cfg config, s *summary) error {
	t := s.t
	addr, flag := cfg.addr()
	switch {
	case t.answered() > 0:
	case t.byClass[errConnect] > 0:
		return fmt.Errorf("cannot reach the limiter at %s (%s): %d connection attempts failed",
			addr, flag, t.byClass[errConnect])
	case t.byClass[errUnavail] > 0:
		return fmt.Errorf("cannot reach the limiter at %s (%s): %d calls failed with UNAVAILABLE",
			addr, flag, t.byClass[errUnavail])
	}
	if t.requests > 0 && s.errorRatio() > cfg.maxErrors {
		return fmt.Errorf("%d errors in %d requests: ratio %.4f over -max-errors %g",
			t.errors, t.requests, s.errorRatio(), cfg.maxErrors)
	}
	return nil
}

func writeSummaryFile(path string, s *summary) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("-summary-file: %w", err)
	}
	if err := s.writeShell(f); err != nil {
		f.Close()
		return fmt.Errorf("-summary-file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("-summary-file: %w", err)
	}
	return nil
}
