package limiter

import (
	"testing"
	"time"
)

func TestInstanceDivisor(t *testing.T) {
	tests := []struct {
		name       string
		counts     instanceCounts
		want       int64
		wantSource string
	}{
		{"nothing known: alone", instanceCounts{}, 1, SourceNone},
		{"expected", instanceCounts{expected: 3}, 3, SourceExpected},
		{"expected 1 says nothing", instanceCounts{expected: 1}, 1, SourceNone},
		{"disk before the heartbeats", instanceCounts{stored: map[string]int64{SourceDisk: 3}}, 3, SourceDisk},
		{"redis before the heartbeats", instanceCounts{stored: map[string]int64{SourceRedis: 4, SourceDisk: 3}}, 4, SourceRedis},
		{"a first beat alone does not hide the stored count",
			instanceCounts{beat: 1, stored: map[string]int64{SourceDisk: 3}}, 3, SourceDisk},
		{"a first beat counting more wins",
			instanceCounts{beat: 5, stored: map[string]int64{SourceDisk: 3}}, 5, SourceHeartbeats},
		{"complete heartbeats replace the stored counts",
			instanceCounts{beat: 2, complete: true, stored: map[string]int64{SourceDisk: 3, SourceRedis: 3}}, 2, SourceHeartbeats},
		{"heartbeats alone", instanceCounts{beat: 1, complete: true}, 1, SourceHeartbeats},
		{"the expected count is a floor", instanceCounts{beat: 2, complete: true, expected: 3}, 3, SourceExpected},
		{"heartbeats over the expected count", instanceCounts{beat: 4, complete: true, expected: 3}, 4, SourceHeartbeats},
		{"largest of all before the heartbeats",
			instanceCounts{expected: 2, stored: map[string]int64{SourceRedis: 6, SourceDisk: 3}}, 6, SourceRedis},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, source := tt.counts.divisor()
			if n != tt.want || source != tt.wantSource {
				t.Fatalf("divisor() = %d from %s, want %d from %s", n, source, tt.want, tt.wantSource)
			}
		})
	}
}

func TestKeptCount(t *testing.T) {
	type obs struct {
		at          time.Duration
		n           int64
		kept        int64
		wantChanged bool
	}
	tests := []struct {
		name string
		from int64
		obs  []obs
	}{
		{"a rise is kept at once", 0, []obs{{0, 1, 1, true}, {time.Second, 3, 3, true}, {2 * time.Second, 3, 3, false}}},
		{"a fleet stopping leaves its size", 3, []obs{{0, 2, 3, false}, {time.Second, 1, 3, false}, {30 * time.Second, 1, 3, false}}},
		{"a drop that lasts is kept, its largest count", 3, []obs{{0, 2, 3, false}, {10 * time.Second, 1, 3, false}, {20 * time.Second, 2, 3, false},
			{dropSettle, 2, 2, true}, {dropSettle + time.Second, 2, 2, false}}},
		{"a count back to the kept one ends the drop", 3, []obs{{0, 2, 3, false}, {30 * time.Second, 3, 3, false},
			{40 * time.Second, 2, 3, false}, {40*time.Second + dropSettle - time.Millisecond, 2, 3, false}}},
		{"a start alone does not overwrite the stored count", 3, []obs{{0, 1, 3, false}, {5 * time.Second, 3, 3, false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := keptCount{kept: tt.from}
			start := time.Unix(1_700_000_000, 0)
			for i, o := range tt.obs {
				kept, changed := k.observe(o.n, start.Add(o.at))
				if kept != o.kept || changed != o.wantChanged {
					t.Fatalf("observation %d (%d at %v): kept %d, changed %v; want %d, %v", i, o.n, o.at, kept, changed, o.kept, o.wantChanged)
				}
			}
		})
	}
}
