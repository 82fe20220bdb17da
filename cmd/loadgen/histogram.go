package main

import (
	"math"
	"math/bits"
	"time"
)

// Histogram is a log-linear latency histogram in the manner of HdrHistogram:
// exact below 256 ns, then 128 equal buckets per power of two, so any value
// is known to within 1/128 of itself (the reported midpoint to within 0.4%).
// It covers 0 to 60 s (longer values are counted in the last bucket, while
// Max stays exact) in a fixed 30 KiB.
//
// It has no lock: each worker owns one, and the collector merges them under
// the worker's own mutex. It is pure: no clock, no I/O.
type Histogram struct {
	counts [histBuckets]uint64
	total  uint64
	sum    uint64 // nanoseconds, for the mean
	min    uint64
	max    uint64
	// lo and hi bound the buckets in use, so that Merge and Reset touch a few
	// hundred words rather than the whole array once per interval.
	lo, hi int
}

const (
	histSubBits = 8
	histSub     = 1 << histSubBits // buckets of the first, exact, range
	histHalf    = histSub / 2      // buckets per power of two above it
	// HistogramMax is the longest latency told apart from longer ones.
	HistogramMax = 60 * time.Second
	// histMaxBits is bits.Len64(HistogramMax in ns), which a constant
	// cannot call; a test checks it.
	histMaxBits = 36
	histBuckets = (histMaxBits-histSubBits)*histHalf + histSub
)

// bucketOf returns the bucket of v nanoseconds (v ≤ HistogramMax).
func bucketOf(v uint64) int {
	if v < histSub {
		return int(v)
	}
	shift := bits.Len64(v) - histSubBits // ≥ 1; v>>shift is in [histHalf, histSub)
	return shift*histHalf + int(v>>shift)
}

// bucketBounds returns the smallest value of bucket i and its width.
func bucketBounds(i int) (low, width uint64) {
	if i < histSub {
		return uint64(i), 1
	}
	shift := i/histHalf - 1
	sub := uint64(i - shift*histHalf)
	return sub << shift, 1 << shift
}

// Record adds one latency; negative ones count as zero.
func (h *Histogram) Record(d time.Duration) {
	v := uint64(max(d, 0))
	if h.total == 0 || v < h.min {
		h.min = v
	}
	h.max = max(h.max, v)
	h.total++
	h.sum += v
	i := bucketOf(min(v, uint64(HistogramMax)))
	if h.total == 1 {
		h.lo, h.hi = i, i
	} else {
		h.lo, h.hi = min(h.lo, i), max(h.hi, i)
	}
	h.counts[i]++
}

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 { return h.total }

// Max is the largest recorded value, exact.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Min is the smallest recorded value, exact.
func (h *Histogram) Min() time.Duration { return time.Duration(h.min) }

// Mean is the exact mean of the recorded values.
func (h *Histogram) Mean() time.Duration {
	if h.total == 0 {
		return 0
	}
	return time.Duration(h.sum / h.total)
}

// Quantile returns the value at quantile q (0 ≤ q ≤ 1) with the
// nearest-rank definition: the smallest value such that a fraction q of the
// values are at or below it. It reports the middle of the bucket holding it,
// clamped to the exact minimum and maximum (and the maximum itself for the
// last rank); 0 when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.total)))
	rank = min(max(rank, 1), h.total)
	if rank == h.total {
		return time.Duration(h.max) // exact, and past HistogramMax too
	}
	var seen uint64
	for i := h.lo; i <= h.hi; i++ {
		seen += h.counts[i]
		if seen >= rank {
			low, width := bucketBounds(i)
			mid := low + (width-1)/2
			return time.Duration(min(max(mid, h.min), h.max))
		}
	}
	return time.Duration(h.max) // unreachable while counts and total agree
}

// Merge adds every value of o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.total == 0 {
		return
	}
	if h.total == 0 {
		h.min, h.lo, h.hi = o.min, o.lo, o.hi
	} else {
		h.min = min(h.min, o.min)
		h.lo, h.hi = min(h.lo, o.lo), max(h.hi, o.hi)
	}
	h.max = max(h.max, o.max)
	h.total += o.total
	h.sum += o.sum
	for i := o.lo; i <= o.hi; i++ {
		h.counts[i] += o.counts[i]
	}
}

// Reset empties h.
func (h *Histogram) Reset() {
	if h.total > 0 {
		clear(h.counts[h.lo : h.hi+1])
	}
	h.total, h.sum, h.min, h.max, h.lo, h.hi = 0, 0, 0, 0, 0, 0
}
