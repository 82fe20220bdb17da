package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// config is the validated command line.
type config struct {
	protocol    string // protocolHTTP, protocolJSON or protocolGRPC
	rawURL      string
	target      target   // HTTP, JSON: the first of targets
	targets     []target // HTTP, JSON: one per -url entry; worker i sends to targets[i % len]
	grpcAddr    string   // gRPC: host:port
	grpcConns   int      // gRPC: connections the workers share
	domain      string   // gRPC, JSON: the requests' domain
	entries     []string // gRPC, JSON: the keys of the descriptor's entries
	debitAfter  uint64   // gRPC: after an admitted check of hits_addend 0, a call of this hits_addend; 0: none
	token       string
	batch       int // http: checks per request; over 1, sent to POST /v1/check/batch
	workers     int
	rate        float64
	duration    time.Duration
	requests    uint64
	warmup      time.Duration
	timeout     time.Duration
	progress    time.Duration
	traffic     TrafficConfig
	seed        uint64
	summaryFile string
	maxErrors   float64
}

// The protocols of -protocol.
const (
	protocolHTTP = "http" // POST /v1/check over HTTP/1.1
	protocolJSON = "json" // envoyproxy/ratelimit's POST /json over HTTP/1.1
	protocolGRPC = "grpc" // Envoy's ShouldRateLimit over HTTP/2
)

// errFlagParse marks the errors the flag package has already printed.
var errFlagParse = errors.New("invalid command line")

const usageHead = `Usage: loadgen [flags | version]

Sends POST /v1/check requests to a ratewarden limiter over keep-alive
HTTP/1.1 connections and reports throughput, verdicts, errors and latency.
With -protocol grpc it calls Envoy's rate limit service instead
(envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit at -grpc-addr,
plaintext HTTP/2): -workers concurrent calls over -grpc-conns connections,
each a RateLimitRequest in -domain with one descriptor of the -entries of
the same traffic (the client IP as remote_address...); OK counts as
allowed, OVER_LIMIT as denied, any other gRPC status as an error.
With -protocol json it posts the same RateLimitRequest in proto3 JSON to
envoyproxy/ratelimit's POST /json at -url, over keep-alive HTTP/1.1
connections as for /v1/check: 200 with overallCode OK counts as allowed,
429 as denied.
With -batch N (http) each request carries N checks to POST /v1/check/batch;
every check counts as a request of its own, with its batch's latency, and
-rate and -requests count checks.

Closed loop (default): -workers workers each send back to back.
Open loop (-rate R): R requests/s spread evenly over -workers workers;
a request no worker is free to send on time counts its latency from its
due time, so a slow limiter shows in it, and as late when over 1ms behind.

Progress goes to stderr every -progress; the summary to stdout, and with
-summary-file as key=value lines a shell can source (p50_ms, p99_ms, rps...).
Exit status: 0 ok, 1 limiter unreachable or error ratio over -max-errors,
2 bad flags. Loadgen reads no environment variables; help (also -h, -help)
prints this text.

Traffic profiles (-mix):
  normal      -keys clients (IPs -ip-base + n), book/author/search endpoints
              (or -endpoint), GET; a share (-users) with user_id and tier
  bursty      -attackers IPs in 198.51.100.0/24, each a run of -burst
              consecutive bursty requests, then quiet while the others run
  scanner     -attackers IPs in 203.0.113.0/24, runs of 200 requests to
              distinct paths (/.env, /wp-login.php, /api/admin/<random>...)
  bruteforce  -attackers IPs in 192.0.2.0/24, runs of 200 POST /api/login
              with a new user_id each
A profile's requests are its share of the total rate: a scanner trips a
"50 distinct endpoints in 10s" rule only if it sends over 5 requests/s.

Flags:
`

// parseFlags reads the command line. Help (-h, -help or help) goes to
// stdout, with flag.ErrHelp; errors, and the usage after them, to stderr.
func parseFlags(args []string, stdout, stderr io.Writer) (config, error) {
	var cfg config
	var mix, keyOrder, ipBase, entries string
	var keys, cost int
	if len(args) == 1 && args[0] == "help" {
		args = []string{"-help"}
	}
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	var out bytes.Buffer // the flag package's: help or an error, known after Parse
	fs.SetOutput(&out)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usageHead)
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.protocol, "protocol", protocolHTTP, "`protocol`: http (POST /v1/check), json (envoyproxy/ratelimit's POST /json) or grpc (Envoy's ShouldRateLimit)")
	fs.StringVar(&cfg.rawURL, "url", "http://127.0.0.1:8080", "http, json: limiter base `URL` (http://, no TLS); /v1/check (json: /json) is appended; several, comma-separated, share the workers in turn (worker i sends to the i-th modulo their number)")
	fs.StringVar(&cfg.grpcAddr, "grpc-addr", "127.0.0.1:8083", "grpc: `host:port` of the limiter's GRPC_LISTEN_ADDR (plaintext)")
	fs.IntVar(&cfg.grpcConns, "grpc-conns", 4, "grpc: HTTP/2 connections the workers' calls are spread over")
	fs.StringVar(&cfg.domain, "domain", "bench", "grpc, json: the requests' `domain` (an RLS config file's domain)")
	fs.StringVar(&entries, "entries", entryRemoteAddress, "grpc, json: the descriptor's `entries`, in order, of remote_address (client IP), path (endpoint), method")
	fs.Uint64Var(&cfg.debitAfter, "debit-after", 0, "grpc: each request is Envoy AI Gateway's pair: a check of descriptor hits_addend 0, then when admitted a call of this hits_addend (the units the response used); 0: one call")
	fs.StringVar(&cfg.token, "token", "", "bearer `token` sent with every request (grpc: as authorization metadata): one of the limiter's API_TOKENS (empty: none)")
	fs.IntVar(&cfg.batch, "batch", 1, "http: checks per request, 1 to 100; over 1, sent to POST /v1/check/batch (-rate and -requests count checks)")
	fs.IntVar(&cfg.workers, "workers", 16, "http, json: connections, one per worker; grpc: concurrent calls")
	fs.Float64Var(&cfg.rate, "rate", 0, "open loop: requests (checks) per second over all workers; 0: closed loop")
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "measurement length; 0: until -requests are sent")
	fs.Uint64Var(&cfg.requests, "requests", 0, "stop after this many measured requests; 0: no limit")
	fs.DurationVar(&cfg.warmup, "warmup", 0, "load sent before the measurement and left out of it")
	fs.DurationVar(&cfg.timeout, "timeout", 5*time.Second, "connection timeout, and how long a request may take (at least half of it: the deadline is moved every timeout/2, not per request)")
	fs.DurationVar(&cfg.progress, "progress", time.Second, "progress line interval on stderr; 0: none")
	fs.StringVar(&mix, "mix", "normal=100", "traffic mix as profile=weight,...: normal, bursty, scanner, bruteforce")
	fs.IntVar(&keys, "keys", 10000, "distinct normal clients (IP addresses)")
	fs.StringVar(&keyOrder, "key-order", "random", "`order` of the normal clients: random, or sequential (every key touched once per -keys normal requests)")
	fs.StringVar(&ipBase, "ip-base", "100.64.0.0", "IPv4 `address` of normal client 0; client n is this + n (10.0.0.0/8 is exempt in deploy/rules.example.yaml)")
	fs.Float64Var(&cfg.traffic.Users, "users", 0.5, "`fraction` of normal clients that send a user_id (u-<n>) and a tier (VIP for one in ten, else BASIC)")
	fs.StringVar(&cfg.traffic.Endpoint, "endpoint", "", "normal profile's endpoint for every request (e.g. /api/books/17); default: a realistic spread")
	fs.IntVar(&cfg.traffic.Burst, "burst", 50, "requests in a bursty IP's run")
	fs.IntVar(&cfg.traffic.Attackers, "attackers", 8, "IPs of each attacker profile (bursty, scanner, bruteforce), 1-254")
	fs.IntVar(&cost, "cost", 1, "what every request counts for, 1 to 1000000: http's \"cost\", grpc's hits_addend (both left out at 1, the limiter's default)")
	fs.Uint64Var(&cfg.seed, "seed", 1, "seed of the random draws (each worker derives its own)")
	fs.StringVar(&cfg.summaryFile, "summary-file", "", "also write the summary to this `file` as shell-sourceable key=value lines")
	fs.Float64Var(&cfg.maxErrors, "max-errors", 0.01, "highest error ratio (errors/requests) that still exits 0")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			_, _ = out.WriteTo(stdout)
			return cfg, err
		}
		_, _ = out.WriteTo(stderr)
		return cfg, &usageError{fmt.Errorf("%w: %w", errFlagParse, err)}
	}
	if fs.NArg() > 0 {
		return cfg, &usageError{fmt.Errorf("unexpected argument %q (see -h)", fs.Arg(0))}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if err := cfg.finish(set, mix, keyOrder, ipBase, entries, keys, cost); err != nil {
		return cfg, &usageError{err}
	}
	return cfg, nil
}

// protocolFlags are the flags that apply to some protocols only: given
// with another, they would silently do nothing.
var protocolFlags = map[string][]string{
	"url":         {protocolHTTP, protocolJSON},
	"batch":       {protocolHTTP},
	"grpc-addr":   {protocolGRPC},
	"grpc-conns":  {protocolGRPC},
	"domain":      {protocolGRPC, protocolJSON},
	"entries":     {protocolGRPC, protocolJSON},
	"debit-after": {protocolGRPC},
}

// finish validates the flags and fills in what derives from them; set
// holds the flags given.
func (cfg *config) finish(set map[string]bool, mix, keyOrder, ipBase, entries string, keys, cost int) error {
	if err := cfg.finishTargets(set, entries); err != nil {
		return err
	}
	var err error
	if cfg.traffic.Mix, err = ParseMix(mix); err != nil {
		return fmt.Errorf("-mix: %w", err)
	}
	if err := cfg.checkBounds(keys, cost); err != nil {
		return err
	}
	if cost > 1 {
		cfg.traffic.Cost = cost
	}
	cfg.traffic.Keys = keys
	switch keyOrder {
	case "random":
	case "sequential":
		cfg.traffic.Sequential = true
	default:
		return fmt.Errorf("-key-order %q: want random or sequential", keyOrder)
	}
	addr, err := netip.ParseAddr(ipBase)
	if err != nil || !addr.Is4() {
		return fmt.Errorf("-ip-base %q: want an IPv4 address", ipBase)
	}
	b := addr.As4()
	cfg.traffic.IPBase = uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	if uint64(cfg.traffic.IPBase)+uint64(keys)-1 > math.MaxUint32 {
		return fmt.Errorf("-keys %d from -ip-base %s: past 255.255.255.255", keys, ipBase)
	}
	return nil
}

// finishTargets parses the targets of the protocol and its entries, and
// refuses the flags that do not apply to the protocol.
func (cfg *config) finishTargets(set map[string]bool, entries string) error {
	var err error
	switch cfg.protocol {
	case protocolHTTP:
		endpoint := checkPath
		if cfg.batch > 1 {
			endpoint = batchPath
		}
		cfg.targets, err = parseTargets(cfg.rawURL, endpoint)
	case protocolJSON:
		cfg.targets, err = parseTargets(cfg.rawURL, jsonPath)
	case protocolGRPC:
		if err := checkHostPort(cfg.grpcAddr); err != nil {
			return fmt.Errorf("-grpc-addr: %w", err)
		}
	default:
		return fmt.Errorf("-protocol %q: want http, json or grpc", cfg.protocol)
	}
	if err != nil {
		return fmt.Errorf("-url: %w", err)
	}
	if cfg.protocol != protocolHTTP {
		if cfg.entries, err = parseEntries(entries); err != nil {
			return fmt.Errorf("-entries: %w", err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(protocolFlags)) { // the same error for the same flags
		if set[name] && !slices.Contains(protocolFlags[name], cfg.protocol) {
			return fmt.Errorf("-%s does not apply to -protocol %s", name, cfg.protocol)
		}
	}
	if !validToken(cfg.token) {
		return errors.New("-token: printable ASCII without spaces expected")
	}
	for i := range cfg.targets {
		cfg.targets[i].token = cfg.token
	}
	if len(cfg.targets) > 0 {
		cfg.target = cfg.targets[0]
	}
	return nil
}

// checkBounds refuses the numeric and textual flags out of their range.
func (cfg *config) checkBounds(keys, cost int) error {
	switch {
	case cfg.batch < 1 || cfg.batch > maxBatch:
		return fmt.Errorf("-batch %d: want 1 to %d", cfg.batch, maxBatch)
	case cfg.workers < 1 || cfg.workers > 10000:
		return fmt.Errorf("-workers %d: want 1 to 10000", cfg.workers)
	case cfg.rate < 0 || math.IsNaN(cfg.rate) || math.IsInf(cfg.rate, 0):
		return fmt.Errorf("-rate %g: want a non-negative number", cfg.rate)
	case cfg.duration < 0:
		return fmt.Errorf("-duration %s: want a non-negative duration", cfg.duration)
	case cfg.duration == 0 && cfg.requests == 0:
		return errors.New("-duration 0 needs -requests: the run would never end")
	case cfg.warmup < 0:
		return fmt.Errorf("-warmup %s: want a non-negative duration", cfg.warmup)
	case cfg.timeout <= 0:
		return fmt.Errorf("-timeout %s: want a positive duration", cfg.timeout)
	case cfg.progress < 0:
		return fmt.Errorf("-progress %s: want a non-negative duration", cfg.progress)
	case keys < 1:
		return fmt.Errorf("-keys %d: want at least 1", keys)
	case !(cfg.traffic.Users >= 0 && cfg.traffic.Users <= 1):
		return fmt.Errorf("-users %g: want a fraction between 0 and 1", cfg.traffic.Users)
	case cfg.traffic.Endpoint != "" && !strings.HasPrefix(cfg.traffic.Endpoint, "/"):
		return fmt.Errorf("-endpoint %q: want a path starting with /", cfg.traffic.Endpoint)
	case cfg.traffic.Burst < 1:
		return fmt.Errorf("-burst %d: want at least 1", cfg.traffic.Burst)
	case cfg.traffic.Attackers < 1 || cfg.traffic.Attackers > 254:
		return fmt.Errorf("-attackers %d: want 1 to 254", cfg.traffic.Attackers)
	case !(cfg.maxErrors >= 0 && cfg.maxErrors <= 1):
		return fmt.Errorf("-max-errors %g: want a fraction between 0 and 1", cfg.maxErrors)
	case cfg.debitAfter > math.MaxUint32:
		return fmt.Errorf("-debit-after %d: want at most %d", cfg.debitAfter, uint64(math.MaxUint32))
	case cost < 1 || cost > 1_000_000:
		return fmt.Errorf("-cost %d: want 1 to 1000000", cost)
	case cfg.grpcConns < 1 || cfg.grpcConns > 1000:
		return fmt.Errorf("-grpc-conns %d: want 1 to 1000", cfg.grpcConns)
	case cfg.domain == "" || len(cfg.domain) > 255:
		return fmt.Errorf("-domain %q: want 1 to 255 bytes", cfg.domain)
	}
	return nil
}

// checkHostPort checks a host:port to dial.
func checkHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || port == "" {
		return fmt.Errorf("%q: want host:port such as 127.0.0.1:8083", addr)
	}
	return nil
}
