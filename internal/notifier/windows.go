package notifier

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/ratewarden/ratewarden/internal/digest"
	"github.com/ratewarden/ratewarden/internal/event"
)

// windows holds the messages read and not yet committed, by the window of
// their timestamps, and decides when a window is due: when nothing more of
// it is to be expected. It does no I/O; now is always given.
//
// A message's window is that of its timestamp, but never earlier than the
// window of the message before it on its partition, so that where a
// message goes depends on its partition's messages, not on when they were
// read. A timestamp further in the future than the grace (a producer's
// clock ahead, or a hostile message) is misdated: the message counts as
// read when it is read, so it cannot hold its partition back, and it is
// held apart (its own digests, and no effect on where its partition's
// later messages go), so it cannot move the honest messages after it into
// the window of the time they happened to be read. Since windows may then
// close out of their partition's order, what is committed is computed
// (settle): never past a message still held.
type windows struct {
	delay, grace time.Duration
	max          int
	open         map[int64]*window
	count        int
	parts        map[int]*partitionState
	// firstRead is when the first message was read (a restart's backlog
	// takes a moment to arrive from every partition); lastRead when the
	// last was, or when reading resumed after a delivery.
	firstRead, lastRead time.Time
}

// window is the messages of one window; misdated says, for each, whether
// it was placed by the time it was read rather than by its timestamp.
type window struct {
	msgs     []event.Message
	bans     []*event.Ban // nil for a message that is not a ban
	misdated []bool
}

type partitionState struct {
	topic     string
	last      int64 // the window of its last message placed by its timestamp (noWindow: none yet)
	caughtUp  bool  // its last message was the end of the partition
	delivered int64 // the highest offset delivered
	committed int64 // the highest offset given to Commit
}

// noWindow is the window of a partition of which only misdated messages
// were read: it may be behind in any window.
const noWindow = math.MinInt64

func newWindows(delay, grace time.Duration, limit int) *windows {
	return &windows{delay: delay, grace: grace, max: limit, open: map[int64]*window{}, parts: map[int]*partitionState{}}
}

// add holds m (ban nil when m is not one), read at now; hwm is the
// partition's high-water mark as m's fetch saw it.
func (w *windows) add(m event.Message, hwm int64, ban *event.Ban, now time.Time) {
	t, misdated := m.Time, false
	switch {
	case t.IsZero(), t.Unix() < 0:
		// Before the epoch Kafka has no timestamp, and before 1678
		// UnixNano wraps, which would put the window centuries ahead and
		// never close it: the message counts as read now.
		t = now
	case t.After(now.Add(w.grace)):
		t, misdated = now, true
	}
	idx := digest.Window(t, w.delay)
	p := w.parts[m.Partition]
	if p == nil {
		p = &partitionState{last: noWindow, delivered: -1, committed: -1}
		w.parts[m.Partition] = p
	}
	if !misdated {
		idx = max(idx, p.last)
		p.last = idx
	}
	p.topic, p.caughtUp = m.Topic, m.Offset+1 >= hwm
	win := w.open[idx]
	if win == nil {
		win = &window{}
		w.open[idx] = win
	}
	win.msgs, win.bans, win.misdated = append(win.msgs, m), append(win.bans, ban), append(win.misdated, misdated)
	w.count++
	if w.firstRead.IsZero() {
		w.firstRead = now
	}
	w.lastRead = now
}

// len is how many messages are held.
func (w *windows) len() int { return w.count }

// full reports whether no more messages may be held.
func (w *windows) full() bool { return w.count >= w.max }

// oldest returns the earliest window holding messages.
func (w *windows) oldest() (int64, bool) {
	first, ok := int64(0), false
	for idx := range w.open {
		if !ok || idx < first {
			first, ok = idx, true
		}
	}
	return first, ok
}

// due reports whether window idx may close at now: its end and the grace
// have passed, and no partition is still behind in it, unless the
// messages held reach the bound or nothing has been read for a grace.
func (w *windows) due(idx int64, now time.Time) bool {
	_, end := digest.WindowBounds(idx, w.delay)
	switch {
	case now.Before(end.Add(w.grace)), now.Before(w.firstRead.Add(w.grace)):
		return false
	case w.full(), !now.Before(w.lastRead.Add(w.grace)):
		return true
	}
	for _, p := range w.parts {
		if p.last <= idx && !p.caughtUp {
			return false // more of the window may be on its way
		}
	}
	return true
}

// take removes window idx and returns it (nil if it holds nothing).
func (w *windows) take(idx int64) *window {
	win := w.open[idx]
	if win == nil {
		return nil
	}
	delete(w.open, idx)
	w.count -= len(win.msgs)
	return win
}

// putBack returns what take took, when its delivery was cut short.
func (w *windows) putBack(idx int64, win *window) {
	w.open[idx] = win
	w.count += len(win.msgs)
}

// settle records that the messages of a window taken were delivered and
// returns what may now be committed: for each of their partitions, the
// highest offset delivered below every offset still held there (a
// misdated message, held in a later window, holds its partition's commit
// back until it is delivered too), if it is beyond what was committed.
func (w *windows) settle(delivered []event.Message) []event.Message {
	touched := map[int]bool{}
	for _, m := range delivered {
		p := w.parts[m.Partition]
		p.delivered = max(p.delivered, m.Offset)
		touched[m.Partition] = true
	}
	held := map[int]int64{} // the lowest offset still held, of the partitions touched
	for _, win := range w.open {
		for _, m := range win.msgs {
			if o, ok := held[m.Partition]; touched[m.Partition] && (!ok || m.Offset < o) {
				held[m.Partition] = m.Offset
			}
		}
	}
	var out []event.Message
	for part := range touched {
		p := w.parts[part]
		upTo := p.delivered
		if o, ok := held[part]; ok && o <= upTo {
			upTo = o - 1
		}
		if upTo > p.committed {
			out = append(out, event.Message{Topic: p.topic, Partition: part, Offset: upTo})
			p.committed = upTo
		}
	}
	slices.SortFunc(out, func(a, b event.Message) int { return cmp.Compare(a.Partition, b.Partition) })
	return out
}

// resumed notes that reading resumes at now after a delivery, so the time
// the delivery took does not read as a silent topic.
func (w *windows) resumed(now time.Time) {
	if now.After(w.lastRead) {
		w.lastRead = now
	}
}
