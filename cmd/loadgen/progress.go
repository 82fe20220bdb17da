package main

import (
	"fmt"
	"io"
	"time"
)

// reportProgress collects the workers' counts every interval and writes one
// line per interval to out, until stop is closed.
func reportProgress(stop <-chan struct{}, every time.Duration, col *collector, sched *schedule, out io.Writer) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-tick.C:
			dt := col.collect(now)
			fmt.Fprintln(out, progressLine(now.Sub(sched.measure), dt, col, sched.rate > 0))
		}
	}
}

// progressLine describes the last interval: the running count of measured
// requests, then the interval's rate, verdicts, errors and p99. Before the
// measurement starts, elapsed is negative and the line says warm-up.
func progressLine(elapsed, dt time.Duration, col *collector, open bool) string {
	in := &col.interval
	secs := dt.Seconds()
	if secs <= 0 {
		secs = 1
	}
	if elapsed < 0 && in.requests == 0 {
		return fmt.Sprintf("loadgen: warm-up, %.1fs to go: requests=%d rate=%.0f/s errors=%d",
			-elapsed.Seconds(), col.warm.requests, float64(col.warm.requests)/secs, col.warm.errors)
	}
	line := fmt.Sprintf("loadgen: %5.1fs requests=%d | last %.1fs: rate=%.0f/s allowed=%d denied=%d errors=%d",
		elapsed.Seconds(), col.total.requests, dt.Seconds(), float64(in.requests+col.warm.requests)/secs,
		in.allowed, in.denied, in.errors)
	if open {
		line += fmt.Sprintf(" late=%d", in.late)
	}
	return line + fmt.Sprintf(" p99=%s", ms(in.latency.Quantile(0.99)))
}

// ms formats d in milliseconds with three decimals (microseconds), never in
// exponent form.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.3fms", float64(d)/float64(time.Millisecond))
}
