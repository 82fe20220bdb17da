package accesslog

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/internal/endpoint"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/ipprefix"
)

// MaxLine bounds an access-log line: Parse refuses a longer one before
// decoding it. It leaves room for the longest endpoint (event.MaxEndpoint)
// with a query string and JSON escaping, which is at most 6 bytes a byte.
const MaxLine = 64 << 10

// Source is where a line was read: its Kafka message's topic, partition,
// offset and timestamp.
type Source struct {
	Topic     string
	Partition int
	Offset    int64
	// Time is the message's timestamp: the outcome's time when the line
	// has none.
	Time time.Time
}

// Error says why a line was refused. Field is a key of the mapping (ip,
// user, path, method, status, bytes, cost, tier) or "line" for the line as
// a whole: one of ErrorFields, so it may label a metric.
type Error struct {
	Field   string
	Problem string
}

func (e *Error) Error() string {
	if e.Field == "line" {
		return "access log line: " + e.Problem
	}
	return fmt.Sprintf("access log line: %s: %s", e.Field, e.Problem)
}

// ErrorFields lists every Field an Error can name.
func ErrorFields() []string {
	return []string{"line", "ip", "user", "path", "method", "status", "bytes", "cost", "tier"}
}

// Parse turns one access-log line, the value of a Kafka message read at
// src, into an outcome, as mapped by m:
//   - event_id is EventID(src): a line delivered again at the same offset
//     gets the same id, so it counts once downstream;
//   - instance is src.Topic, the access log's topic;
//   - ip is the address in its canonical form (IPv4-mapped IPv6 addresses
//     unmapped, a zone dropped, as the limiter does);
//   - endpoint is endpoint.Normalize of the path (its query string
//     dropped), then event.EscapeEndpoint: a probe for "/x%00" is counted,
//     under "/x%00", rather than refused;
//   - method upper-cased, GET when absent; user and tier as they are;
//   - status an integer 100 to 599;
//   - cost as Mapping.Cost says, 1 when absent; ts as Mapping.Time says;
//   - banned is false: a log line cannot say whether the client was banned.
//
// A field's value may be a JSON string or number; null, "" and "-" (what
// nginx writes for a missing variable) are absent. Parse refuses, with an
// *Error, a line longer than MaxLine, one that is not a JSON object, one
// without ip, path or status, and one whose outcome event.Outcome.Validate
// refuses.
func (m *Mapping) Parse(line []byte, src Source) (event.Outcome, error) {
	if len(line) > MaxLine {
		return event.Outcome{}, &Error{"line", fmt.Sprintf("longer than %d bytes", MaxLine)}
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(line, &fields); err != nil || fields == nil {
		return event.Outcome{}, &Error{"line", "not a JSON object"}
	}
	r := reader{fields: fields}
	o := event.Outcome{EventID: EventID(src), Instance: src.Topic}

	ip := r.text("ip", m.IP)
	path := r.text("path", m.Path)
	status := r.text("status", m.Status)
	o.UserID = r.text("user", m.User)
	o.Method = strings.ToUpper(r.text("method", m.Method))
	o.Tier = r.text("tier", m.Tier)
	cost := r.cost(m)
	ts, _ := value(fields, m.Time) // a time of another type is absent too
	if r.err != nil {
		return event.Outcome{}, r.err
	}

	switch {
	case ip == "":
		return event.Outcome{}, &Error{"ip", fmt.Sprintf("field %q is missing", m.IP)}
	case path == "":
		return event.Outcome{}, &Error{"path", fmt.Sprintf("field %q is missing", m.Path)}
	case status == "":
		return event.Outcome{}, &Error{"status", fmt.Sprintf("field %q is missing", m.Status)}
	}
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return event.Outcome{}, &Error{"ip", fmt.Sprintf("field %q: %q is not an IP address", m.IP, clip(ip))}
	}
	o.IP = ipprefix.Client(addr).String()
	o.Endpoint = event.EscapeEndpoint(endpoint.Normalize(path))
	if o.Status, err = strconv.Atoi(status); err != nil || o.Status < event.MinStatus || o.Status > event.MaxStatus {
		return event.Outcome{}, &Error{"status", fmt.Sprintf("field %q: %q is not an HTTP status, %d to %d",
			m.Status, clip(status), event.MinStatus, event.MaxStatus)}
	}
	if o.Method == "" {
		o.Method = http.MethodGet
	}
	o.Cost = cost
	o.TS = src.Time
	if t, ok := parseTime(ts); ok {
		o.TS = t
	}
	if err := o.Validate(); err != nil {
		return event.Outcome{}, outOfBounds(err)
	}
	return o, nil
}

// outOfBounds turns a refusal of Outcome.Validate into an Error naming the
// mapping's key.
func outOfBounds(err error) error {
	var fe *event.FieldError
	if !errors.As(err, &fe) {
		return &Error{"line", err.Error()}
	}
	key := map[string]string{"ip": "ip", "endpoint": "path", "user_id": "user", "method": "method",
		"tier": "tier", "status": "status", "cost": "cost"}[fe.Field]
	if key == "" {
		key = "line" // event_id, ts, instance: not from the line's fields
	}
	return &Error{key, fmt.Sprintf("out of bounds: %s", fe.Error())}
}

// clip shortens a value quoted in an error.
func clip(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
