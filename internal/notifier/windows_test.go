package notifier

import (
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/digest"
	"github.com/ratewarden/ratewarden/internal/event"
)

func TestWindows(t *testing.T) {
	const delay, grace = 10 * time.Second, time.Second
	w0 := time.Unix(1_000_000_000, 0) // the start of a window (10s aligned)
	msg := func(part int, off int64, at time.Time) event.Message {
		return event.Message{Partition: part, Offset: off, Time: at}
	}
	t.Run("a partition's windows never go back", func(t *testing.T) {
		w := newWindows(delay, grace, 100)
		now := w0.Add(15 * time.Second)
		w.add(msg(0, 0, w0.Add(12*time.Second)), 5, nil, now)
		w.add(msg(0, 1, w0.Add(2*time.Second)), 5, nil, now) // an older clock: joins the later window
		w.add(msg(1, 0, w0.Add(2*time.Second)), 5, nil, now) // another partition: its own time
		first, _ := w.oldest()
		if first != digest.Window(w0, delay) {
			t.Fatalf("oldest window %d", first)
		}
		if msgs := w.take(first).msgs; len(msgs) != 1 || msgs[0].Partition != 1 {
			t.Fatalf("the first window holds %+v", msgs)
		}
		next, _ := w.oldest()
		if msgs := w.take(next).msgs; len(msgs) != 2 {
			t.Fatalf("the second window holds %d messages, want both of partition 0", len(msgs))
		}
	})
	t.Run("a future timestamp counts as read now", func(t *testing.T) {
		w := newWindows(delay, grace, 100)
		now := w0.Add(3 * time.Second)
		w.add(msg(0, 0, now.Add(24*time.Hour)), 1, nil, now)
		if idx, _ := w.oldest(); idx != digest.Window(now, delay) {
			t.Fatalf("window %d, want the current one", idx)
		}
	})
	t.Run("due", func(t *testing.T) {
		w := newWindows(delay, grace, 3)
		read := w0.Add(9 * time.Second)
		w.add(msg(0, 0, w0.Add(time.Second)), 10, nil, read) // partition 0 behind
		idx, _ := w.oldest()
		end := w0.Add(delay)
		if w.due(idx, end.Add(grace/2)) {
			t.Error("due within the grace")
		}
		w.lastRead = end.Add(grace) // still reading
		if w.due(idx, end.Add(grace)) {
			t.Error("due while partition 0 is read behind the window")
		}
		if !w.due(idx, end.Add(2*grace)) {
			t.Error("not due once nothing was read for a grace")
		}
		w.add(msg(0, 9, w0.Add(time.Second)), 10, nil, end.Add(grace)) // caught up
		if !w.due(idx, end.Add(grace)) {
			t.Error("not due with every partition caught up")
		}
		w.add(msg(1, 0, w0.Add(time.Second)), 10, nil, end.Add(grace))
		if !w.full() || !w.due(idx, end.Add(grace)) {
			t.Error("not due with the bound of messages held reached")
		}
	})
}
