package digest

import "time"

// Window is the index of the window of length delay that t falls in:
// windows are aligned on the Unix epoch, so a message's window depends on
// its timestamp alone.
func Window(t time.Time, delay time.Duration) int64 {
	n, d := t.UnixNano(), int64(delay)
	w := n / d
	if n%d < 0 {
		w-- // floor, for times before the epoch
	}
	return w
}

// WindowBounds returns the start and the end of window w.
func WindowBounds(w int64, delay time.Duration) (start, end time.Time) {
	start = time.Unix(0, w*int64(delay)).UTC()
	return start, start.Add(delay)
}
