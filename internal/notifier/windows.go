package notifier

import (
	"time"

	"github.com/ratewarden/ratewarden/internal/digest"
	"github.com/ratewarden/ratewarden/internal/event"
)

// windows holds the messages read and not yet committed, by the window of
// their timestamps, and decides when a window is due: when nothing more of
// it is to be expected. It does no I/O; now is always given.
//
// A message's window is that of its timestamp, but never earlier than the
// window of the message before it on its partition: windows then close in
// the order of every partition's offsets, so committing a window never
// commits a message of a later one. A timestamp in the future (a producer's
// clock ahead, or a hostile message) counts as the time it is read, so it
// cannot hold its partition back.
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

type window struct {
	msgs []event.Message
	bans []*event.Ban // nil for a message that is not a ban
}

type partitionState struct {
	last     int64 // the window of its last message
	caughtUp bool  // its last message was the end of the partition
}

func newWindows(delay, grace time.Duration, limit int) *windows {
	return &windows{delay: delay, grace: grace, max: limit, open: map[int64]*window{}, parts: map[int]*partitionState{}}
}

// add holds m (ban nil when m is not one), read at now; hwm is the
// partition's high-water mark as m's fetch saw it.
func (w *windows) add(m event.Message, hwm int64, ban *event.Ban, now time.Time) {
	t := m.Time
	if t.IsZero() || t.After(now) {
		t = now
	}
	idx := digest.Window(t, w.delay)
	p := w.parts[m.Partition]
	if p == nil {
		p = &partitionState{last: idx}
		w.parts[m.Partition] = p
	}
	idx = max(idx, p.last)
	p.last, p.caughtUp = idx, m.Offset+1 >= hwm
	win := w.open[idx]
	if win == nil {
		win = &window{}
		w.open[idx] = win
	}
	win.msgs, win.bans = append(win.msgs, m), append(win.bans, ban)
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

// take removes window idx and returns its messages and bans.
func (w *windows) take(idx int64) ([]event.Message, []*event.Ban) {
	win := w.open[idx]
	if win == nil {
		return nil, nil
	}
	delete(w.open, idx)
	w.count -= len(win.msgs)
	return win.msgs, win.bans
}

// putBack returns what take took, when its delivery was cut short.
func (w *windows) putBack(idx int64, msgs []event.Message, bans []*event.Ban) {
	w.open[idx] = &window{msgs: msgs, bans: bans}
	w.count += len(msgs)
}

// resumed notes that reading resumes at now after a delivery, so the time
// the delivery took does not read as a silent topic.
func (w *windows) resumed(now time.Time) {
	if now.After(w.lastRead) {
		w.lastRead = now
	}
}
