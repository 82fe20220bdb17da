package notifier

import (
	"fmt"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/digest"
	"github.com/ratewarden/ratewarden/internal/event"
)

// kafka-go's reader maps a timestamp <= 0 to the zero time, but another
// Reader (another client, a test double, a replay tool) may hand over a
// time before 1678, whose UnixNano overflows int64 and wraps to a time
// around the year 2200. Its window would end two centuries away, never be
// due, and take the partition's later messages with it (a partition's
// windows never go back): nothing of the partition would be delivered nor
// committed again. A timestamp before the epoch counts as read now.
func TestAncientTimestampDoesNotStallItsPartition(t *testing.T) {
	const delay, grace = 30 * time.Second, 2 * time.Second
	now := time.Now()
	w := newWindows(delay, grace, 3)
	ancient := time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC)
	w.add(event.Message{Partition: 0, Offset: 0, Time: ancient}, 3, nil, now)
	w.add(event.Message{Partition: 0, Offset: 1, Time: now}, 3, nil, now) // an honest ban after it
	w.add(event.Message{Partition: 0, Offset: 2, Time: now}, 3, nil, now)
	idx, _ := w.oldest()
	_, end := digest.WindowBounds(idx, delay)
	later := now.Add(time.Hour)
	if !w.due(idx, later) {
		t.Fatalf("an hour later the window of a message stamped %s (and of the honest bans after it) is not due: "+
			"its window ends %s (UnixNano wrapped), so the partition is never delivered nor committed", ancient, end)
	}
}

// One message stamped in the future (a hostile producer, or a clock ahead)
// on a partition counts as read when it is read. Were the partition's later
// messages to join its window (a partition's windows never go back), the
// honest bans after it would land in the window of the time the notifier
// happened to read them: read again after a restart (a stop between
// delivery and commit) they would land in another window, beside other
// bans, under other idempotency keys. A misdated message is held apart and
// leaves its partition's later messages where their timestamps put them.
func TestFutureMessageDoesNotMoveTheHonestBansAfterIt(t *testing.T) {
	const delay, grace = 30 * time.Second, 2 * time.Second
	published := time.Now().Truncate(delay).Add(-10 * delay) // a backlog: ten windows ago
	windowOfHonest := func(readAt time.Time) int64 {
		w := newWindows(delay, grace, 100)
		w.add(event.Message{Partition: 0, Offset: 0, Time: published.Add(24 * time.Hour)}, 2, nil, readAt) // from the future
		w.add(event.Message{Partition: 0, Offset: 1, Time: published.Add(time.Second)}, 2, nil, readAt)    // an honest ban
		for idx, win := range w.open {
			for _, m := range win.msgs {
				if m.Offset == 1 {
					return idx
				}
			}
		}
		t.Fatal("the honest message is held in no window")
		return 0
	}
	first, again := windowOfHonest(published.Add(3*delay)), windowOfHonest(published.Add(9*delay))
	if first != again {
		t.Errorf("the honest ban stamped %s is in window %d when read first and %d when read again after a restart; "+
			"its timestamp's window is %d", published.Add(time.Second).Format(time.TimeOnly), first, again,
			digest.Window(published.Add(time.Second), delay))
	}
}

// A misdated message is delivered in a later window than the honest
// messages after it on its partition: until it is, the partition is not
// committed past it, so a stop in between reads it again.
func TestMisdatedMessageHoldsItsPartitionsCommitBack(t *testing.T) {
	const delay, grace = 30 * time.Second, 2 * time.Second
	published := time.Now().Truncate(delay).Add(-10 * delay)
	readAt := published.Add(3 * delay)
	w := newWindows(delay, grace, 100)
	msg := func(part int, off int64, at time.Time) event.Message {
		return event.Message{Topic: "bans", Partition: part, Offset: off, Time: at}
	}
	w.add(msg(0, 0, published), 9, nil, readAt)
	w.add(msg(0, 1, readAt.Add(time.Hour)), 9, nil, readAt) // misdated
	w.add(msg(0, 2, published.Add(time.Second)), 9, nil, readAt)
	w.add(msg(1, 0, published.Add(time.Second)), 9, nil, readAt)
	w.add(msg(0, 3, readAt.Add(grace/2)), 9, nil, readAt) // ahead within the grace: placed by its timestamp
	if _, held := w.open[digest.Window(readAt.Add(grace/2), delay)]; !held {
		t.Errorf("a message ahead by less than the grace is not in its timestamp's window")
	}

	first, _ := w.oldest()
	got := w.settle(w.take(first).msgs)
	if want := []event.Message{{Topic: "bans", Partition: 0, Offset: 0}, {Topic: "bans", Partition: 1, Offset: 0}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the honest window, committed %+v, want %+v: not past the misdated offset 1", got, want)
	}
	next, _ := w.oldest()
	win := w.take(next)
	if len(win.msgs) != 2 || !win.misdated[0] || win.misdated[1] {
		t.Fatalf("the window read in holds %+v (misdated %v), want the misdated message and the one ahead within the grace", win.msgs, win.misdated)
	}
	if got := w.settle(win.msgs); len(got) != 1 || got[0].Partition != 0 || got[0].Offset != 3 {
		t.Fatalf("once the misdated message is delivered, committed %+v, want partition 0 up to offset 3", got)
	}
}
