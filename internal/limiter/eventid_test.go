package limiter

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ratewarden/ratewarden/internal/testkit"
)

func TestEventIDs(t *testing.T) {
	var clock v7Clock
	before := time.Now().UnixMilli()
	prev := ""
	for range 10_000 {
		s := clock.newEventID()
		id, err := uuid.Parse(s)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if id.Version() != 7 || id.Variant() != uuid.RFC4122 || id.String() != s {
			t.Fatalf("%q: version %d, variant %s, canonical %q", s, id.Version(), id.Variant(), id.String())
		}
		// Canonical lowercase hex compares as the UUIDs' bytes do.
		if s <= prev {
			t.Fatalf("%q after %q: not increasing", s, prev)
		}
		prev = s
		ms := int64(id[0])<<40 | int64(id[1])<<32 | int64(id[2])<<24 | int64(id[3])<<16 | int64(id[4])<<8 | int64(id[5])
		if ms < before || ms > time.Now().UnixMilli()+1 {
			t.Fatalf("%q: time %d outside [%d, now]", s, ms, before)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = clock.newEventID() }); n != 1 && !testkit.RaceDetector {
		t.Errorf("newEventID: %v allocations, want 1 (the string)", n)
	}
}

func TestV7StampsIncreaseWhenTheClockGoesBack(t *testing.T) {
	var c v7Clock
	now := time.UnixMilli(1_700_000_000_000).Add(500 * time.Microsecond)
	a := c.next(now)
	if want := int64(1_700_000_000_000)<<12 | 2048; a != want {
		t.Fatalf("stamp %d, want %d", a, want)
	}
	if b := c.next(now.Add(-time.Second)); b != a+1 {
		t.Fatalf("stamp %d after %d, want %d", b, a, a+1)
	}
	if b := c.next(now); b != a+2 {
		t.Fatalf("stamp %d for the same instant, want %d", b, a+2)
	}
}
