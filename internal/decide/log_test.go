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
	if s := nthFrom(log, 4, 3); s != 7 {
		t.Errorf("nthFrom(4, 3) = %d, want 7", s)
	}
	if got, want := keepNewest(slices.Clone(log), 3), []run{{5, 1}, {7, 1}, {9, 1}}; !slices.Equal(got, want) {
		t.Errorf("keepNewest(3) = %v, want %v", got, want)
	}
	if got, want := dropBelow(slices.Clone(log), 6), []run{{7, 1}, {9, 1}}; !slices.Equal(got, want) {
		t.Errorf("dropBelow(6) = %v, want %v", got, want)
	}
}

func TestShardOfHashTag(t *testing.T) {
	if shardOf("a:{x}:state") != shardOf("b:{x}:hits") {
		t.Error("keys with one hash tag land in different shards")
	}
	if shardOf("a:{}:state") != shardOf("a:{}:state") {
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
