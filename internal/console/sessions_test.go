package console

import (
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock                   { return &clock{t: time.Now()} }

func TestSessionsExpire(t *testing.T) {
	tests := []struct {
		name  string
		steps []time.Duration // uses of the session, each after this long
		alive bool
	}{
		{"used within idle", []time.Duration{29 * time.Minute}, true},
		{"idle too long", []time.Duration{30 * time.Minute}, false},
		{"kept alive by use", []time.Duration{20 * time.Minute, 20 * time.Minute, 20 * time.Minute}, true},
		{"past its absolute age however used", []time.Duration{25 * time.Minute, 25 * time.Minute, 25 * time.Minute, 25 * time.Minute, 25 * time.Minute}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClock()
			s := newSessions(10, 10, 30*time.Minute, 2*time.Hour, c.now)
			ss := s.start(User{Name: "ana", Role: Operator})
			alive := true
			for _, d := range tt.steps {
				c.advance(d)
				_, alive = s.get(ss.id)
			}
			if alive != tt.alive {
				t.Fatalf("alive %v, want %v", alive, tt.alive)
			}
			if !alive && s.len() != 0 {
				t.Fatalf("an expired session is still held")
			}
		})
	}
}

// Past its bound the store ends the least recently used session.
func TestSessionsBounded(t *testing.T) {
	c := newClock()
	s := newSessions(2, 2, time.Hour, 2*time.Hour, c.now)
	a, b := s.start(User{Name: "a"}), s.start(User{Name: "b"})
	s.get(a.id) // b is now the least recently used
	cc := s.start(User{Name: "c"})
	if _, ok := s.get(b.id); ok {
		t.Fatal("the least recently used session survived the bound")
	}
	for _, id := range []string{a.id, cc.id} {
		if _, ok := s.get(id); !ok {
			t.Fatal("a recent session was ended")
		}
	}
	if s.len() != 2 {
		t.Fatalf("%d sessions held, want 2", s.len())
	}
	if a.id == cc.id || a.csrf == a.id || len(a.id) != 43 {
		t.Fatalf("session ids and tokens: want 256 random bits each, distinct")
	}
}

func TestLoginThrottle(t *testing.T) {
	c := newClock()
	th := newLoginThrottle(3, time.Minute, 100, c.now)
	for range 3 {
		if !th.allowed("addr 1", "user a") {
			t.Fatal("refused within the burst")
		}
		th.record("addr 1", "user a")
	}
	if th.allowed("addr 1") || th.allowed("user a") || th.allowed("addr 2", "user a") {
		t.Fatal("allowed past the burst")
	}
	if !th.allowed("addr 2", "user b") {
		t.Fatal("other keys refused")
	}
	c.advance(time.Minute)
	if !th.allowed("addr 1", "user a") {
		t.Fatal("still refused a refill later")
	}
}

// The throttle holds at most max keys, and a flood of new keys does not
// free a key under attack.
func TestLoginThrottleBounded(t *testing.T) {
	c := newClock()
	th := newLoginThrottle(3, time.Minute, 10, c.now)
	for range 3 {
		th.record("user target")
	}
	for i := range 100 {
		th.record("addr " + string(rune('a'+i%26)) + string(rune('a'+i/26)))
	}
	if len(th.keys) > 10 {
		t.Fatalf("%d keys held, want at most 10", len(th.keys))
	}
	if th.allowed("user target") {
		t.Fatal("the flood freed the key under attack")
	}
}
