package event

import (
	"fmt"
	"net/netip"
	"time"
	"unicode/utf8"
)

// Bounds of a decision: the limiter refuses a request beyond them (400), so
// no decision event it publishes exceeds them, and consumers refuse an
// event that does (Decision.Validate). They are defined here, once, and the
// limiter's HTTP API uses them, so what the limiter accepts and what the
// detector and the archiver accept cannot drift apart. Lengths are in
// bytes.
const (
	// MaxEndpoint bounds the endpoint a client sends. The event carries the
	// normalized endpoint, which is at most one byte longer: normalization
	// adds a leading '/' to a path without one, and otherwise only shortens
	// (percent-decoding turns 3 bytes into 1; a decoded byte that is not
	// UTF-8, which the encoder writes as U+FFFD, takes the 3 bytes back).
	MaxEndpoint = 8 << 10
	// MaxUserID bounds user_id (also the subject of a user ban).
	MaxUserID = 512
	// MaxTier bounds tier.
	MaxTier = 64
	// MaxMethod bounds method, an HTTP method token (see ValidMethod).
	MaxMethod = 32
	// MaxEventID bounds event_id (the limiter writes a 36-byte UUID).
	MaxEventID = 64
	// MaxName bounds what the operator, not the client, names: instance
	// (INSTANCE_ID, checked at start), rule_id (64 bytes at most by the
	// rules' validation), algorithm and mode.
	MaxName = 256

	// Bounds of the rate limit API (ShouldRateLimit, POST /json): the
	// domain, the descriptors of one request, the entries of one
	// descriptor, one entry's key and value, and all keys and values of a
	// request together.
	MaxDomain          = 255
	MaxDescriptors     = 64
	MaxEntries         = 16
	MaxDescriptorKey   = 256
	MaxDescriptorValue = 1024
	MaxDescriptorBytes = 16 << 10
)

// maxEventEndpoint is the longest endpoint a valid event carries: see
// MaxEndpoint.
const maxEventEndpoint = MaxEndpoint + 1

// minEventTime is the earliest valid event time: the Unix epoch. A limiter
// never stamps a decision before it; the zero time.Time (0001-01-01), which
// a broken producer writes, is far before it and would reach the ledger as
// "no time".
var minEventTime = time.Unix(0, 0).UTC()

// FieldError says which field of a decision event is out of bounds. Field
// is the JSON name of the field, one of a fixed set (InvalidFields), so it
// may label a metric.
type FieldError struct {
	Field   string
	Problem string
}

func (e *FieldError) Error() string { return fmt.Sprintf("field %q: %s", e.Field, e.Problem) }

// InvalidFields lists every Field a FieldError from Validate can name, so
// that a metric labelled by field can start each series at 0.
func InvalidFields() []string {
	return []string{"event_id", "ts", "ip", "endpoint", "user_id", "tier", "method", "instance", "rule_id", "algorithm", "mode", "domain", "descriptors"}
}

// Validate reports the first field of d outside the bounds the limiter
// applies to what it publishes, as a *FieldError, or nil:
//   - event_id at most MaxEventID bytes;
//   - ts not before the Unix epoch (its upper bound is the reader's
//     business: the detector bounds it by its own clock);
//   - ip an IP address without zone;
//   - endpoint at most MaxEndpoint+1 bytes, user_id MaxUserID, tier MaxTier,
//     all valid UTF-8 without control characters;
//   - method empty or an HTTP method token of at most MaxMethod bytes;
//   - instance, rule_id, algorithm and mode valid UTF-8 of at most MaxName
//     bytes;
//   - domain and descriptors within the rate limit API's bounds
//     (ValidDescriptorText for each string, MaxDescriptorBytes in all).
//
// Presence of the required fields and the reason are DecodeDecision's
// checks. Such an event can never be processed: consumers skip it.
func (d *Decision) Validate() error {
	if len(d.EventID) > MaxEventID || !utf8.ValidString(d.EventID) {
		return &FieldError{"event_id", fmt.Sprintf("must be valid UTF-8 of at most %d bytes", MaxEventID)}
	}
	if d.TS.Before(minEventTime) {
		return &FieldError{"ts", "before 1970-01-01T00:00:00Z"}
	}
	if addr, err := netip.ParseAddr(d.IP); err != nil || addr.Zone() != "" {
		return &FieldError{"ip", "not an IP address without zone"}
	}
	for _, f := range [...]struct {
		name, value string
		max         int
	}{{"endpoint", d.Endpoint, maxEventEndpoint}, {"user_id", d.UserID, MaxUserID}, {"tier", d.Tier, MaxTier}} {
		if len(f.value) > f.max || !utf8.ValidString(f.value) || HasControl(f.value) {
			return &FieldError{f.name, fmt.Sprintf("must be valid UTF-8 of at most %d bytes without control characters", f.max)}
		}
	}
	if d.Method != "" && !ValidMethod(d.Method) {
		return &FieldError{"method", fmt.Sprintf("must be an HTTP method token of at most %d letters", MaxMethod)}
	}
	for _, f := range [...]struct{ name, value string }{
		{"instance", d.Instance}, {"rule_id", d.RuleID}, {"algorithm", d.Algorithm}, {"mode", d.Mode},
	} {
		if len(f.value) > MaxName || !utf8.ValidString(f.value) {
			return &FieldError{f.name, fmt.Sprintf("must be valid UTF-8 of at most %d bytes", MaxName)}
		}
	}
	return d.validateDescriptors()
}

func (d *Decision) validateDescriptors() error {
	if d.Domain == "" && len(d.Descriptors) == 0 {
		return nil
	}
	if !ValidDescriptorText(d.Domain, MaxDomain) || d.Domain == "" {
		return &FieldError{"domain", fmt.Sprintf("must be 1 to %d bytes of UTF-8 without control characters", MaxDomain)}
	}
	if len(d.Descriptors) > MaxDescriptors {
		return &FieldError{"descriptors", fmt.Sprintf("at most %d", MaxDescriptors)}
	}
	total := 0
	for _, desc := range d.Descriptors {
		if len(desc.Entries) > MaxEntries || len(desc.RuleID) > MaxName || len(desc.Code) > MaxName {
			return &FieldError{"descriptors", fmt.Sprintf("a descriptor has more than %d entries or an oversized rule_id or code", MaxEntries)}
		}
		for _, e := range desc.Entries {
			total += len(e.Key) + len(e.Value)
			if !ValidDescriptorText(e.Key, MaxDescriptorKey) || !ValidDescriptorText(e.Value, MaxDescriptorValue) {
				return &FieldError{"descriptors", fmt.Sprintf("keys and values must be UTF-8 without control characters, at most %d and %d bytes", MaxDescriptorKey, MaxDescriptorValue)}
			}
		}
	}
	if total > MaxDescriptorBytes {
		return &FieldError{"descriptors", fmt.Sprintf("keys and values add up to more than %d bytes", MaxDescriptorBytes)}
	}
	return nil
}

// ValidDescriptorText reports whether s is at most max bytes of valid UTF-8
// without control characters: a domain, descriptor key or value the rate
// limit API accepts.
func ValidDescriptorText(s string, max int) bool {
	return len(s) <= max && utf8.ValidString(s) && !HasControl(s)
}

// HasControl reports whether s holds an ASCII control character (C0 or
// DEL). The limiter refuses them in what a client sends: they reach events
// and logs, and Postgres cannot store NUL in text.
func HasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return true
		}
	}
	return false
}

// EscapeEndpoint returns endpoint with every byte that a valid event's
// endpoint may not hold, a control character or a byte that is not part of
// UTF-8, percent-encoded ("/a\x00" becomes "/a%00"); an endpoint without
// one is returned as it is. The limiter refuses such endpoints on its own
// API, but Envoy's rate limit API must decide them (Envoy lets a request
// through when its rate limit service answers an error): escaped, their
// events stay valid, so the detector counts them and the archiver keeps
// them, each distinct path as a distinct endpoint. The result is at most 3
// times as long as endpoint.
func EscapeEndpoint(endpoint string) string {
	if utf8.ValidString(endpoint) && !HasControl(endpoint) {
		return endpoint
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(endpoint)+16)
	for i := 0; i < len(endpoint); {
		r, size := utf8.DecodeRuneInString(endpoint[i:])
		if c := endpoint[i]; (r == utf8.RuneError && size == 1) || c < 0x20 || c == 0x7f {
			b = append(b, '%', hex[c>>4], hex[c&0xf])
			i++
			continue
		}
		b = append(b, endpoint[i:i+size]...)
		i += size
	}
	return string(b)
}

// ValidMethod reports whether m is an HTTP method token as the limiter
// accepts it: 1 to MaxMethod ASCII letters, '-' or '_'.
func ValidMethod(m string) bool {
	if m == "" || len(m) > MaxMethod {
		return false
	}
	for i := 0; i < len(m); i++ {
		c := m[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
