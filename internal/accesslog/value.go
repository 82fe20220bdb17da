package accesslog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// reader takes the values of a line's fields as text, keeping the first
// error.
type reader struct {
	fields map[string]json.RawMessage
	err    error
}

// text returns the value of field as text, the contents of a string or the
// literal of a number; "" when field is off ("") or the value absent (no
// such field, null, "" or "-"). Another JSON type is an Error naming key.
func (r *reader) text(key, field string) string {
	s, ok := value(r.fields, field)
	if !ok && r.err == nil {
		r.err = &Error{key, fmt.Sprintf("field %q is neither a string nor a number", field)}
	}
	return s
}

// value returns the text of fields[field], and false when it is neither a
// string, a number nor null.
func value(fields map[string]json.RawMessage, field string) (string, bool) {
	raw, found := fields[field]
	if field == "" || !found {
		return "", true
	}
	raw = bytes.TrimSpace(raw)
	var s string
	switch {
	case len(raw) == 0:
		return "", true
	case raw[0] == '"':
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", false
		}
	case raw[0] == '-' || ('0' <= raw[0] && raw[0] <= '9'):
		s = string(raw) // json.Unmarshal of the line checked its syntax
	case string(raw) == "null":
		return "", true
	default:
		return "", false
	}
	if s = strings.TrimSpace(s); s == "-" {
		return "", true
	}
	return s, true
}

// cost returns the outcome's cost as m maps it: the cost field, or the
// bytes field when Cost is CostFromBytes; 1 when off or absent.
func (r *reader) cost(m *Mapping) int64 {
	key, field := "cost", m.Cost
	if field == CostFromBytes {
		key, field = "bytes", m.Bytes
	}
	s := r.text(key, field)
	if s == "" {
		return 1
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		if r.err == nil {
			r.err = &Error{key, fmt.Sprintf("field %q: %q is not an integer ≥ 0", field, clip(s))}
		}
		return 0
	}
	return n
}

// timeLocal is the layout of nginx's $time_local.
const timeLocal = "02/Jan/2006:15:04:05 -0700"

// epoch is the earliest time an outcome may carry.
var epoch = time.Unix(0, 0)

// parseTime parses an RFC 3339 time ($time_iso8601), nginx's $time_local,
// or seconds since the epoch with an optional fraction ($msec). A time
// before the epoch or after the year 9999 (which RFC 3339, the outcome's
// encoding, cannot write) does not parse.
func parseTime(s string) (time.Time, bool) {
	if s == "" {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t, err = time.Parse(timeLocal, s)
	}
	if err != nil {
		var ok bool
		if t, ok = parseSeconds(s); !ok {
			return time.Time{}, false
		}
	}
	if t.Before(epoch) || t.Year() > 9999 {
		return time.Time{}, false
	}
	return t.UTC(), true
}

// parseSeconds parses digits, optionally followed by '.' and more digits
// (nanoseconds beyond the ninth are dropped), as seconds since the epoch.
// At most 12 integer digits: past the year 33 000.
func parseSeconds(s string) (time.Time, bool) {
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" || len(whole) > 12 || !digits(whole) || !digits(frac) {
		return time.Time{}, false
	}
	sec, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	if len(frac) > 9 {
		frac = frac[:9]
	}
	var nsec int64
	if frac != "" {
		nsec, _ = strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
	}
	return time.Unix(sec, nsec), true
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
