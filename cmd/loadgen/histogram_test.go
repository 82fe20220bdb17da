package main

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// referenceQuantile is the nearest-rank quantile of sorted values.
func referenceQuantile(sorted []time.Duration, q float64) time.Duration {
	rank := int(math.Ceil(q * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

func TestHistogramQuantilesMatchSortedReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	tests := []struct {
		name string
		n    int
		draw func() time.Duration
	}{
		{"constant", 1000, func() time.Duration { return 1234567 * time.Nanosecond }},
		{"sub-microsecond exact range", 5000, func() time.Duration { return time.Duration(rng.IntN(256)) }},
		{"uniform 1us-10ms", 100000, func() time.Duration { return time.Microsecond + time.Duration(rng.Int64N(int64(10*time.Millisecond))) }},
		{"log-uniform 1us-60s", 100000, func() time.Duration {
			return time.Duration(math.Exp(math.Log(1e3) + rng.Float64()*(math.Log(6e10)-math.Log(1e3))))
		}},
		{"bimodal with a slow tail", 50000, func() time.Duration {
			if rng.IntN(100) == 0 {
				return 200*time.Millisecond + time.Duration(rng.Int64N(int64(time.Second)))
			}
			return 300*time.Microsecond + time.Duration(rng.Int64N(int64(200*time.Microsecond)))
		}},
		{"single value", 1, func() time.Duration { return 42 * time.Millisecond }},
	}
	qs := []float64{0, 0.001, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999, 1}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Histogram
			values := make([]time.Duration, tt.n)
			for i := range values {
				values[i] = tt.draw()
				h.Record(values[i])
			}
			slices.Sort(values)
			if h.Count() != uint64(tt.n) || h.Min() != values[0] || h.Max() != values[len(values)-1] {
				t.Fatalf("count/min/max = %d/%s/%s, want %d/%s/%s", h.Count(), h.Min(), h.Max(), tt.n, values[0], values[len(values)-1])
			}
			for _, q := range qs {
				got, want := h.Quantile(q), referenceQuantile(values, q)
				if diff := math.Abs(float64(got - want)); diff > 0.01*float64(want) {
					t.Errorf("q%g = %s, reference %s: off by %.2f%%", q, got, want, 100*diff/float64(want))
				}
			}
			var sum time.Duration
			for _, v := range values {
				sum += v
			}
			if want := sum / time.Duration(tt.n); h.Mean() != want {
				t.Errorf("mean = %s, want %s", h.Mean(), want)
			}
		})
	}
}

func TestHistogramBuckets(t *testing.T) {
	if got := bits.Len64(uint64(HistogramMax)); got != histMaxBits {
		t.Fatalf("histMaxBits = %d, want bits.Len64(HistogramMax) = %d", histMaxBits, got)
	}
	if i := bucketOf(uint64(HistogramMax)); i >= histBuckets {
		t.Fatalf("bucketOf(HistogramMax) = %d, beyond %d buckets", i, histBuckets)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	prev := -1
	for v := uint64(0); v < 5000; v++ { // contiguous: every bucket follows the previous one
		i := bucketOf(v)
		if i != prev && i != prev+1 {
			t.Fatalf("bucketOf(%d) = %d after %d: a gap", v, i, prev)
		}
		prev = i
	}
	for range 100000 {
		v := rng.Uint64N(uint64(HistogramMax) + 1)
		low, width := bucketBounds(bucketOf(v))
		if v < low || v >= low+width {
			t.Fatalf("%d not in its bucket [%d, %d)", v, low, low+width)
		}
		if width > 1 && float64(width)/float64(low) > 1.0/128 {
			t.Fatalf("bucket of %d: width %d over 1/128 of %d", v, width, low)
		}
	}
}

func TestHistogramOutOfRange(t *testing.T) {
	var h Histogram
	h.Record(-time.Second)
	h.Record(90 * time.Second)
	h.Record(2 * time.Hour)
	if h.Min() != 0 || h.Max() != 2*time.Hour || h.Quantile(1) != 2*time.Hour {
		t.Fatalf("min %s max %s q1 %s: want 0, 2h, 2h", h.Min(), h.Max(), h.Quantile(1))
	}
	if q := h.Quantile(0.5); q < HistogramMax*99/100 || q > HistogramMax {
		t.Fatalf("median of values past the range = %s, want about %s", q, HistogramMax)
	}
}

func TestHistogramMergeAndReset(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var a, b, all Histogram
	for i := range 20000 {
		v := time.Duration(rng.Int64N(int64(50 * time.Millisecond)))
		if i%3 == 0 {
			v += time.Second // b's range starts above a's
			b.Record(v)
		} else {
			a.Record(v)
		}
		all.Record(v)
	}
	var merged Histogram
	merged.Merge(&Histogram{}) // empty: no effect
	merged.Merge(&a)
	merged.Merge(&b)
	if merged != all {
		t.Fatalf("merge differs from recording everything in one histogram")
	}
	merged.Reset()
	if merged != (Histogram{}) {
		t.Fatalf("reset left values behind")
	}
	if merged.Quantile(0.5) != 0 || merged.Mean() != 0 {
		t.Fatalf("empty histogram reports non-zero values")
	}
}

func BenchmarkHistogramRecord(b *testing.B) {
	var h Histogram
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		h.Record(time.Duration(i&0xfffff) * 100)
	}
}
