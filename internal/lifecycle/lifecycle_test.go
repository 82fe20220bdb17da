package lifecycle

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/testkit"
)

// journal records what the parts do, in order.
type journal struct {
	mu      sync.Mutex
	entries []string
}

func (j *journal) add(e string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.entries = append(j.entries, e)
}

func (j *journal) get() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.entries)
}

// recorded is a part that records its start, its Run's end and its stop.
func recorded(j *journal, name string, withRun bool) Part {
	p := Part{
		Name:  name,
		Start: func(context.Context) error { j.add("start " + name); return nil },
		Stop:  func(context.Context) error { j.add("stop " + name); return nil },
	}
	if withRun {
		p.Run = func(ctx context.Context) error { <-ctx.Done(); j.add("run ended " + name); return ctx.Err() }
	}
	return p
}

func TestStartsInOrderAndStopsInReverse(t *testing.T) {
	var j journal
	g := New(zap.NewNop(), time.Second)
	g.Add(recorded(&j, "a", false), recorded(&j, "b", true), recorded(&j, "c", false))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	testkit.WaitFor(t, 5*time.Second, "the three to start", func() bool { return len(j.get()) == 3 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel: %v, want nil", err)
	}
	want := []string{"start a", "start b", "start c", "stop c", "stop b", "run ended b", "stop a"}
	if got := j.get(); !slices.Equal(got, want) {
		t.Fatalf("journal %q, want %q", got, want)
	}
}

func TestStartFailureStopsWhatStarted(t *testing.T) {
	var j journal
	boom := errors.New("LISTEN_ADDR :1: permission denied")
	g := New(zap.NewNop(), time.Second)
	g.Add(recorded(&j, "a", true), Part{Name: "b", Start: func(context.Context) error { return boom }}, recorded(&j, "c", false))
	if err := g.Run(context.Background()); !errors.Is(err, boom) || err.Error() != boom.Error() {
		t.Fatalf("Run: %v, want the start error as it is", err)
	}
	if got, want := j.get(), []string{"start a", "stop a", "run ended a"}; !slices.Equal(got, want) {
		t.Fatalf("journal %q, want %q", got, want)
	}
}

func TestRunFailureStopsTheProcess(t *testing.T) {
	var j journal
	boom := errors.New("consumer gave up")
	g := New(zap.NewNop(), time.Second)
	g.Add(recorded(&j, "a", false),
		Part{Name: "consumer", Run: func(context.Context) error { return boom }},
		recorded(&j, "c", false))
	err := g.Run(context.Background())
	if !errors.Is(err, boom) || err.Error() != "consumer: consumer gave up" {
		t.Fatalf("Run: %v, want the consumer's error named after it", err)
	}
	if got, want := j.get(), []string{"start a", "start c", "stop c", "stop a"}; !slices.Equal(got, want) {
		t.Fatalf("journal %q, want %q", got, want)
	}
}

// A part that outlasts the deadline is left behind; the parts before it are
// stopped all the same, with the deadline's context.
// A Run that returns nil before its part is stopped stops the process too:
// it has nothing left to do.
func TestRunEndingStopsTheProcess(t *testing.T) {
	var j journal
	g := New(zap.NewNop(), time.Second)
	g.Add(recorded(&j, "a", false), Part{Name: "consumer", Run: func(context.Context) error { return nil }})
	if err := g.Run(context.Background()); err != nil {
		t.Fatalf("Run: %v, want nil", err)
	}
	if got, want := j.get(), []string{"start a", "stop a"}; !slices.Equal(got, want) {
		t.Fatalf("journal %q, want %q", got, want)
	}
}

func TestStopDeadline(t *testing.T) {
	var j journal
	release, started := make(chan struct{}), make(chan struct{})
	defer close(release)
	g := New(zap.NewNop(), 50*time.Millisecond)
	g.Add(
		Part{Name: "first", Stop: func(ctx context.Context) error {
			j.add("stop first, deadline passed: " + map[bool]string{true: "yes", false: "no"}[ctx.Err() != nil])
			return nil
		}},
		Part{Name: "stuck", Start: func(context.Context) error { close(started); return nil },
			Run: func(context.Context) error { <-release; return nil }},
	)
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	<-started
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, want := j.get(), []string{"stop first, deadline passed: yes"}; !slices.Equal(got, want) {
		t.Fatalf("journal %q, want %q", got, want)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("Run waited for the stuck part")
	}
}

// A process told to stop while it starts starts nothing more.
func TestCanceledWhileStarting(t *testing.T) {
	var j journal
	ctx, cancel := context.WithCancel(context.Background())
	g := New(zap.NewNop(), time.Second)
	g.Add(recorded(&j, "a", false), Part{Name: "warm-up", Start: func(context.Context) error { cancel(); return nil }}, recorded(&j, "b", false))
	if err := g.Run(ctx); err != nil {
		t.Fatalf("Run: %v, want nil", err)
	}
	if got, want := j.get(), []string{"start a", "stop a"}; !slices.Equal(got, want) {
		t.Fatalf("journal %q, want %q", got, want)
	}
}
