package main

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// summary is the result of a run.
type summary struct {
	protocol    string
	url         string
	domain      string // gRPC, JSON
	workers     int
	batch       int // checks per request
	conns       int
	rate        float64       // target; 0 in closed loop
	elapsed     time.Duration // of the measurement
	warmup      time.Duration
	interrupted bool // by a signal, before the end
	mix         Mix
	t           *tally
}

// quantiles are the latency quantiles reported, with their key suffixes.
var quantiles = []struct {
	q    float64
	name string // in the text
	key  string // in the shell file
}{
	{0.50, "p50", "p50_ms"},
	{0.90, "p90", "p90_ms"},
	{0.99, "p99", "p99_ms"},
	{0.999, "p99.9", "p999_ms"},
}

func (s *summary) rps() float64 {
	if s.elapsed <= 0 {
		return 0
	}
	return float64(s.t.requests) / s.elapsed.Seconds()
}

func (s *summary) mode() string {
	if s.rate > 0 {
		return "open"
	}
	return "closed"
}

// ratio is n/of, 0 when of is 0.
func ratio(n, of uint64) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}

func (s *summary) errorRatio() float64 { return ratio(s.t.errors, s.t.requests) }

// writeText writes the summary for people.
func (s *summary) writeText(w io.Writer) error {
	b := bufio.NewWriter(w)
	t := s.t
	switch s.protocol {
	case protocolGRPC:
		fmt.Fprintf(b, "target     %s, domain %s\n", s.url, s.domain)
		fmt.Fprintf(b, "mode       %s loop, %d concurrent calls over %d HTTP/2 connections", s.mode(), s.workers, s.conns)
	case protocolJSON:
		fmt.Fprintf(b, "target     %s, domain %s\n", s.url, s.domain)
		fmt.Fprintf(b, "mode       %s loop, %d connections", s.mode(), s.workers)
	default:
		fmt.Fprintf(b, "target     %s\n", s.url)
		fmt.Fprintf(b, "mode       %s loop, %d connections", s.mode(), s.workers)
	}
	if s.batch > 1 {
		fmt.Fprintf(b, ", %d checks per request (POST /v1/check/batch)", s.batch)
	}
	if s.rate > 0 {
		fmt.Fprintf(b, ", %.1f req/s wanted", s.rate)
	}
	fmt.Fprintf(b, ", mix %s\n", s.mix)
	fmt.Fprintf(b, "duration   %.3fs measured", s.elapsed.Seconds())
	if s.warmup > 0 {
		fmt.Fprintf(b, " after %.3fs of warm-up", s.warmup.Seconds())
	}
	if s.interrupted {
		b.WriteString(" (interrupted)")
	}
	b.WriteString("\n")
	if s.batch > 1 {
		fmt.Fprintf(b, "requests   %d checks (%.1f/s) in %d HTTP requests of %d\n", t.requests, s.rps(), t.requests/uint64(s.batch), s.batch)
	} else {
		fmt.Fprintf(b, "requests   %d (%.1f req/s)\n", t.requests, s.rps())
	}
	fmt.Fprintf(b, "allowed    %d (%.2f%%)\n", t.allowed, 100*ratio(t.allowed, t.requests))
	fmt.Fprintf(b, "denied     %d (%.2f%%)\n", t.denied, 100*ratio(t.denied, t.requests))
	fmt.Fprintf(b, "errors     %d (%.2f%%)%s\n", t.errors, 100*s.errorRatio(), nonZero(t.byClass[:], errClassNames[:], 1))
	if s.rate > 0 {
		fmt.Fprintf(b, "late       %d (%.2f%%, a worker was free only over %s after the due time)\n", t.late, 100*ratio(t.late, t.requests), lateAfter)
	}
	fmt.Fprintf(b, "reasons   %s\n", nonZero(t.byReason[:], reasonNames[:], 0))
	if s.protocol == protocolGRPC {
		fmt.Fprintf(b, "codes     %s\n", nonZero(t.byCode[:], codeNames[:], 0))
	} else {
		b.WriteString("status    ")
		for i, n := range t.byStatus {
			if n > 0 {
				fmt.Fprintf(b, " %d=%d", i+100, n)
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("latency   ")
	for _, q := range quantiles {
		fmt.Fprintf(b, " %s=%s", q.name, ms(t.latency.Quantile(q.q)))
	}
	fmt.Fprintf(b, " max=%s mean=%s\n", ms(t.latency.Max()), ms(t.latency.Mean()))
	fmt.Fprintf(b, "%-10s %10s %10s %10s %10s %10s\n", "profile", "requests", "allowed", "denied", "banned", "errors")
	for p, pt := range t.byProfile {
		if s.mix[p] > 0 || pt.requests > 0 {
			fmt.Fprintf(b, "%-10s %10d %10d %10d %10d %10d\n", Profile(p), pt.requests, pt.allowed, pt.denied, pt.banned, pt.errors)
		}
	}
	return b.Flush()
}

// nonZero lists the non-zero counts from index from on as " name=n ...",
// in parentheses when from is 1 (error classes), else bare.
func nonZero(counts []uint64, names []string, from int) string {
	var parts []string
	for i := from; i < len(counts); i++ {
		if counts[i] > 0 {
			parts = append(parts, names[i]+"="+strconv.FormatUint(counts[i], 10))
		}
	}
	switch {
	case len(parts) == 0:
		return ""
	case from == 1:
		return " (" + strings.Join(parts, " ") + ")"
	default:
		return " " + strings.Join(parts, " ")
	}
}

// writeShell writes the summary as key=value lines a shell can source:
// names are shell identifiers, numbers are in fixed notation, the only
// string values are single-quoted.
func (s *summary) writeShell(w io.Writer) error {
	b := bufio.NewWriter(w)
	t := s.t
	kv := func(k string, v any) { fmt.Fprintf(b, "%s=%v\n", k, v) }
	f := func(k string, v float64, decimals int) { kv(k, strconv.FormatFloat(v, 'f', decimals, 64)) }
	kv("protocol", s.protocol)
	kv("url", shellQuote(s.url))
	if s.protocol != protocolHTTP {
		kv("domain", shellQuote(s.domain))
	}
	kv("mode", s.mode())
	kv("workers", s.workers)
	kv("conns", s.conns)
	kv("batch", s.batch)
	f("target_rate", s.rate, 1)
	f("duration_s", s.elapsed.Seconds(), 3)
	f("warmup_s", s.warmup.Seconds(), 3)
	kv("interrupted", b2i(s.interrupted))
	kv("requests", t.requests)
	f("rps", s.rps(), 1)
	kv("allowed", t.allowed)
	kv("denied", t.denied)
	kv("errors", t.errors)
	f("error_ratio", s.errorRatio(), 6)
	kv("late", t.late)
	for c := errConnect; c < numErrClasses; c++ {
		kv("errors_"+c.String(), t.byClass[c])
	}
	for r := range numReasons {
		kv("reason_"+r.String(), t.byReason[r])
	}
	for i, n := range t.byStatus {
		if n > 0 {
			kv("status_"+strconv.Itoa(i+100), n)
		}
	}
	for i, n := range t.byCode {
		if n > 0 {
			kv("code_"+codeNames[i], n)
		}
	}
	for _, q := range quantiles {
		f(q.key, millis(t.latency.Quantile(q.q)), 3)
	}
	f("max_ms", millis(t.latency.Max()), 3)
	f("mean_ms", millis(t.latency.Mean()), 3)
	for p := range numProfiles {
		pt := t.byProfile[p]
		name := p.String()
		kv(name+"_requests", pt.requests)
		kv(name+"_allowed", pt.allowed)
		kv(name+"_denied", pt.denied)
		kv(name+"_banned", pt.banned)
		kv(name+"_errors", pt.errors)
	}
	return b.Flush()
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// shellQuote single-quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
