package decide

import (
	"slices"
	"testing"
)

func TestLogHelpers(t *testing.T) {
	var log []run
	for _, s := range []int64{5, 3, 5, 9, 3, 7} {
		log = insertRun(log, s, 1)
	}
	if want := []run{{3, 2}, {5, 2}, {7, 1}, {9, 1}}; !slices.Equal(log, want) {
		t.Fatalf("insertRun: %v, want %v", log, want)
	}
	if n := countFrom(log, 5); n != 4 {
		t.Errorf("countFrom(5) = %d, want 4", n)
	}
	if got, want := keepNewest(slices.Clone(log), 3), []run{{5, 1}, {7, 1}, {9, 1}}; !slices.Equal(got, want) {
		t.Errorf("keepNewest(3) = %v, want %v", got, want)
	}
}

func TestSpanHelpers(t *testing.T) {
	const near = totalWrap - 5
	for _, tt := range []struct{ total, cost, want int64 }{
		{0, 7, 7}, {near, 4, totalWrap - 1}, {near, 5, 0}, {near, 12, 7}, {3, totalWrap - 1, 2},
	} {
		if got := plus(tt.total, tt.cost); got != tt.want {
			t.Errorf("plus(%d, %d) = %d, want %d", tt.total, tt.cost, got, tt.want)
		}
		if got := units(plus(tt.total, tt.cost), tt.total); got != tt.cost {
			t.Errorf("units after plus(%d, %d) = %d", tt.total, tt.cost, got)
		}
	}
	// 3 units at 10, 2 at 11, 4 at 15 and 1 at 20, the total wrapping at 15
	log := []span{{10, near - 3, near}, {11, near, near + 2}, {15, near + 2, 1}, {20, 1, 2}}
	for _, tt := range []struct {
		first int
		need  int64
		want  int64
	}{
		{0, 1, 10}, {0, 3, 10}, {0, 4, 11}, {0, 6, 15}, {0, 10, 20}, {2, 4, 15}, {2, 5, 20},
	} {
		if got := nthScore(log, tt.first, tt.need); got != tt.want {
			t.Errorf("nthScore(first %d, need %d) = %d, want %d", tt.first, tt.need, got, tt.want)
		}
	}
	if got := trimSpans(slices.Clone(log), 15); len(got) != 2 || got[0].score != 15 {
		t.Errorf("trimSpans(15) = %v", got)
	}
	many := make([]span, 100)
	for i := range many {
		many[i] = span{score: int64(i), base: int64(i), cum: int64(i + 1)}
	}
	if got := trimSpans(many, 99); len(got) != 100-maxTrim || got[0].score != maxTrim {
		t.Errorf("trimSpans of 99 stale spans kept %d from %d, want %d from %d (maxTrim)", len(got), got[0].score, 100-maxTrim, maxTrim)
	}
}

func TestShardOfHashTag(t *testing.T) {
	if shardOf("a:{x}:state") != shardOf("b:{x}:hits") {
		t.Error("keys with one hash tag land in different shards")
	}
	first, second := shardOf("a:{}:state"), shardOf("a:{}:state")
	if first != second {
		t.Error("shardOf is not deterministic")
	}
}

func TestDivmod(t *testing.T) {
	for _, tt := range []struct{ a, b, q, r int64 }{
		{7, 3, 2, 1}, {-7, 3, -3, 2}, {6, 3, 2, 0}, {-6, 3, -2, 0},
	} {
		if q, r := divmod(tt.a, tt.b); q != tt.q || r != tt.r {
			t.Errorf("divmod(%d, %d) = %d, %d, want %d, %d", tt.a, tt.b, q, r, tt.q, tt.r)
		}
	}
	if c := ceilDiv(7, 3); c != 3 {
		t.Errorf("ceilDiv(7, 3) = %d", c)
	}
}
