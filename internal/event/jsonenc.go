package event

import (
	"time"
)

// appendTime appends t in UTC as 2006-01-02T15:04:05.000000Z, without the
// quotes. Years outside 0-9999 fall back to time.AppendFormat.
func appendTime(dst []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return t.AppendFormat(dst, "2006-01-02T15:04:05.000000Z07:00")
	}
	hour, minute, sec := t.Clock()
	dst = appendDigits(dst, year, 4)
	dst = append(dst, '-')
	dst = appendDigits(dst, int(month), 2)
	dst = append(dst, '-')
	dst = appendDigits(dst, day, 2)
	dst = append(dst, 'T')
	dst = appendDigits(dst, hour, 2)
	dst = append(dst, ':')
	dst = appendDigits(dst, minute, 2)
	dst = append(dst, ':')
	dst = appendDigits(dst, sec, 2)
	dst = append(dst, '.')
	dst = appendDigits(dst, t.Nanosecond()/1000, 6)
	return append(dst, 'Z')
}

// appendDigits appends v (non-negative) zero-padded to width digits.
func appendDigits(dst []byte, v, width int) []byte {
	var buf [8]byte
	for i := width - 1; i >= 0; i-- {
		buf[i] = byte('0' + v%10)
		v /= 10
	}
	return append(dst, buf[:width]...)
}

// formatTime is appendTime for the encoding/json based encoders.
func formatTime(t time.Time) string {
	var buf [32]byte
	return string(appendTime(buf[:0], t))
}
