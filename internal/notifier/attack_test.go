package notifier

// Tests that reproduce weaknesses found by attacking the notifier. They
// FAIL on this branch by design: each documents an attack and the behaviour
// expected once it is fixed.

import (
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/digest"
	"github.com/ratewarden/ratewarden/internal/event"
)

// Latent (not reachable through kafka-go v0.4.51, whose reader maps a
// timestamp <= 0 to the zero time, which windows.add treats as now): a
// message whose time is before 1678 reaches windows.add from any other
// Reader (another client, a test double, a replay tool). It is not "in the
// future", so windows.add keeps it, and digest.Window takes its UnixNano,
// which overflows int64 and wraps to a time around the year 2200. Its
// window's end is then two centuries away: due() is false for it whatever
// the bound, and the partition's later messages join it (a partition's
// windows never go back). The messages of that partition are never
// delivered nor committed; once NOTIFY_MAX_PENDING are held the notifier
// stops fetching for good, and a restart reads the same message again.
//
// Expected: a timestamp outside what UnixNano represents (or simply before
// the topic could exist) counts as read now, like one in the future.
func TestAttackAncientTimestampStallsItsPartitionForever(t *testing.T) {
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

// Attack: one message stamped in the future (a hostile producer, or a
// clock ahead) on a partition. It counts as read when it is read, and the
// partition's later messages join its window (a partition's windows never
// go back). So the honest bans after it land in the window of the time the
// notifier happened to read them, not of their timestamps: read again after
// a restart (a SIGKILL between delivery and commit) they land in another
// window, beside other bans, and are sent again under other idempotency
// keys, which a receiver's deduplication cannot recognise. docs/
// ban-notifications.md promises the same digest with the same key except in
// the cases it lists, and this is not one of them.
//
// Expected: an honest message's window depends on its timestamp alone (a
// message from the future is held in its own window, say, without raising
// the partition's floor), or the docs list the case.
func TestAttackFutureMessageMovesTheHonestBansAfterIt(t *testing.T) {
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
