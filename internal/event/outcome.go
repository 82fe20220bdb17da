package event

import (
	"encoding/json"
	"fmt"
	"strconv"

	"time"

	"github.com/ratewarden/ratewarden/internal/jsonwire"
)

// Outcome is one message of ratelimit.outcomes: what happened after a
// response, as a gateway or an application reported it (POST /v1/report).
// The message key is the client IP.
type Outcome struct {
	EventID  string    `json:"event_id"`
	TS       time.Time `json:"ts"`
	Instance string    `json:"instance"`
	UserID   string    `json:"user_id"`
	IP       string    `json:"ip"`
	Endpoint string    `json:"endpoint"`
	Method   string    `json:"method"`
	Tier     string    `json:"tier"`
	// Status is the HTTP status the client got, MinStatus to MaxStatus.
	Status int `json:"status"`
	// Cost is the units the request used (1 when the report gave none).
	Cost int64 `json:"cost"`
	// Banned is true when the client IP (the source) was banned when the
	// report arrived: the failure is most likely the ban's own refusal,
	// and bans never feed new bans (the detector skips such outcomes).
	Banned bool `json:"banned"`
	// UserBanned is true when the user was banned (a locked account) when
	// the report arrived: the account's own budgets and scenario stop, and
	// the failure still counts against its source.
	UserBanned bool `json:"user_banned"`
	// Hold is the hold id the report named (the check's answer), absent
	// when it named none: its concurrency rules' holds were released.
	Hold string `json:"hold,omitempty"`
}

// The HTTP statuses an outcome may carry.
const (
	MinStatus = 100
	MaxStatus = 599
)

// AppendJSON appends the JSON object of o to dst and returns the extended
// buffer; every field is always present but hold, ts as in
// Decision.AppendJSON.
func (o *Outcome) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"event_id":`...)
	dst = jsonwire.AppendString(dst, o.EventID)
	dst = append(dst, `,"ts":"`...)
	dst = appendTime(dst, o.TS)
	dst = append(dst, `","instance":`...)
	dst = jsonwire.AppendString(dst, o.Instance)
	dst = append(dst, `,"user_id":`...)
	dst = jsonwire.AppendString(dst, o.UserID)
	dst = append(dst, `,"ip":`...)
	dst = jsonwire.AppendString(dst, o.IP)
	dst = append(dst, `,"endpoint":`...)
	dst = jsonwire.AppendString(dst, o.Endpoint)
	dst = append(dst, `,"method":`...)
	dst = jsonwire.AppendString(dst, o.Method)
	dst = append(dst, `,"tier":`...)
	dst = jsonwire.AppendString(dst, o.Tier)
	dst = append(dst, `,"status":`...)
	dst = strconv.AppendInt(dst, int64(o.Status), 10)
	dst = append(dst, `,"cost":`...)
	dst = strconv.AppendInt(dst, o.Cost, 10)
	dst = append(dst, `,"banned":`...)
	dst = strconv.AppendBool(dst, o.Banned)
	dst = append(dst, `,"user_banned":`...)
	dst = strconv.AppendBool(dst, o.UserBanned)
	if o.Hold != "" {
		dst = append(dst, `,"hold":`...)
		dst = jsonwire.AppendString(dst, o.Hold)
	}
	return append(dst, '}')
}

// DecodeOutcome parses and validates one ratelimit.outcomes message.
// Unknown fields are ignored. event_id, ts, ip, endpoint and status are
// required, and the outcome must be within the limiter's bounds (Validate:
// the error then wraps a *FieldError).
func DecodeOutcome(data []byte) (Outcome, error) {
	var w struct {
		Outcome
		TS     string `json:"ts"`
		Status *int   `json:"status"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return Outcome{}, fmt.Errorf("decode outcome: %w", err)
	}
	for _, f := range [...]struct{ name, value string }{
		{"event_id", w.EventID}, {"ts", w.TS}, {"ip", w.IP}, {"endpoint", w.Endpoint},
	} {
		if f.value == "" {
			return Outcome{}, fmt.Errorf("decode outcome: field %q is required", f.name)
		}
	}
	if w.Status == nil {
		return Outcome{}, fmt.Errorf("decode outcome: field %q is required", "status")
	}
	ts, err := parseTime("ts", w.TS)
	if err != nil {
		return Outcome{}, fmt.Errorf("decode outcome: %w", err)
	}
	o := w.Outcome
	o.TS, o.Status = ts, *w.Status
	if err := o.Validate(); err != nil {
		return Outcome{}, fmt.Errorf("decode outcome: %w", err)
	}
	return o, nil
}

// Validate reports the first field of o outside the bounds the limiter
// applies to what it publishes, as a *FieldError, or nil: the subject's
// fields as Decision.Validate has them, status MinStatus to MaxStatus, cost
// not negative.
func (o *Outcome) Validate() error {
	d := Decision{EventID: o.EventID, TS: o.TS, Instance: o.Instance, UserID: o.UserID, IP: o.IP,
		Endpoint: o.Endpoint, Method: o.Method, Tier: o.Tier}
	if err := d.Validate(); err != nil {
		return err
	}
	if o.Status < MinStatus || o.Status > MaxStatus {
		return &FieldError{"status", fmt.Sprintf("must be an HTTP status, %d to %d", MinStatus, MaxStatus)}
	}
	if o.Cost < 0 {
		return &FieldError{"cost", "must not be negative"}
	}
	return nil
}

// InvalidOutcomeFields lists every Field a FieldError from
// Outcome.Validate can name.
func InvalidOutcomeFields() []string {
	return []string{"event_id", "ts", "ip", "endpoint", "user_id", "tier", "method", "instance", "status", "cost"}
}
