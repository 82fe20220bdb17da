// Package event holds the wire types published on the Kafka topics
// (ratelimit.decisions, ratelimit.outcomes, ratelimit.bans) and their JSON
// encoding, and Message, what a consumer of the topics sees of a message. The field
// names are the external contract (docs/events.md, deploy/schemas): fields
// may be added, never renamed or removed, and decoders tolerate unknown
// fields.
package event

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/ratewarden/ratewarden/internal/jsonwire"
)

// Reasons a decision can carry, as in the limiter's HTTP answer.
const (
	ReasonOK          = "ok"
	ReasonRateLimited = "rate_limited"
	ReasonBanned      = "banned"
	ReasonExempt      = "exempt"
	ReasonNoRule      = "no_rule"
)

// Modes a decision can be made in, as in the limiter's HTTP answer.
const (
	ModeRedis      = "redis"
	ModeLocal      = "local" // without Redis: by the rules' on_redis_failure
	ModePermissive = "permissive"
)

// Decision is one message of ratelimit.decisions: one limiter decision.
// The message key is the client IP.
type Decision struct {
	EventID      string    `json:"event_id"`
	TS           time.Time `json:"ts"`
	Instance     string    `json:"instance"`
	UserID       string    `json:"user_id"`
	IP           string    `json:"ip"`
	Endpoint     string    `json:"endpoint"`
	Method       string    `json:"method"`
	Tier         string    `json:"tier"`
	RuleID       string    `json:"rule_id"`
	Algorithm    string    `json:"algorithm"`
	Allowed      bool      `json:"allowed"`
	Reason       string    `json:"reason"`
	Limit        int64     `json:"limit"`
	Remaining    int64     `json:"remaining"`
	RetryAfterMS int64     `json:"retry_after_ms"`
	Mode         string    `json:"mode"`
	Shadow       bool      `json:"shadow"`
	// Domain and Descriptors are those of a decision of Envoy's rate limit
	// API (ShouldRateLimit, POST /json), and absent from the JSON of other
	// decisions: the request's domain and its descriptors, in order.
	Domain      string       `json:"domain,omitempty"`
	Descriptors []Descriptor `json:"descriptors,omitempty"`
	// Hold is the id of the holds an admitted request took on the keys of
	// its concurrency rules (the check's answer names it, and the
	// request's outcome event carries it again), absent when it took none:
	// the two events give the request's hold time.
	Hold string `json:"hold,omitempty"`
}

// Descriptor is one descriptor of a rate limit API decision, with its
// outcome.
type Descriptor struct {
	Entries []Entry `json:"entries"`
	// RuleID is the rule that decided the descriptor; empty when none
	// matched (its code is then OK).
	RuleID string `json:"rule_id"`
	// Code is the descriptor's status as the API answered it: OK or
	// OVER_LIMIT.
	Code string `json:"code"`
}

// Entry is one key/value pair of a descriptor.
type Entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// The descriptor codes of Envoy's rate limit API.
const (
	CodeOK        = "OK"
	CodeOverLimit = "OVER_LIMIT"
)

// AppendJSON appends the JSON object of d to dst and returns the extended
// buffer. Every field is always present but domain and descriptors, which
// only rate limit API decisions carry; ts is UTC RFC 3339 with
// microseconds. It does not allocate when dst has enough capacity.
func (d *Decision) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"event_id":`...)
	dst = jsonwire.AppendString(dst, d.EventID)
	dst = append(dst, `,"ts":"`...)
	dst = appendTime(dst, d.TS)
	dst = append(dst, `","instance":`...)
	dst = jsonwire.AppendString(dst, d.Instance)
	dst = append(dst, `,"user_id":`...)
	dst = jsonwire.AppendString(dst, d.UserID)
	dst = append(dst, `,"ip":`...)
	dst = jsonwire.AppendString(dst, d.IP)
	dst = append(dst, `,"endpoint":`...)
	dst = jsonwire.AppendString(dst, d.Endpoint)
	dst = append(dst, `,"method":`...)
	dst = jsonwire.AppendString(dst, d.Method)
	dst = append(dst, `,"tier":`...)
	dst = jsonwire.AppendString(dst, d.Tier)
	dst = append(dst, `,"rule_id":`...)
	dst = jsonwire.AppendString(dst, d.RuleID)
	dst = append(dst, `,"algorithm":`...)
	dst = jsonwire.AppendString(dst, d.Algorithm)
	dst = append(dst, `,"allowed":`...)
	dst = strconv.AppendBool(dst, d.Allowed)
	dst = append(dst, `,"reason":`...)
	dst = jsonwire.AppendString(dst, d.Reason)
	dst = append(dst, `,"limit":`...)
	dst = strconv.AppendInt(dst, d.Limit, 10)
	dst = append(dst, `,"remaining":`...)
	dst = strconv.AppendInt(dst, d.Remaining, 10)
	dst = append(dst, `,"retry_after_ms":`...)
	dst = strconv.AppendInt(dst, d.RetryAfterMS, 10)
	dst = append(dst, `,"mode":`...)
	dst = jsonwire.AppendString(dst, d.Mode)
	dst = append(dst, `,"shadow":`...)
	dst = strconv.AppendBool(dst, d.Shadow)
	if d.Hold != "" {
		dst = append(dst, `,"hold":`...)
		dst = jsonwire.AppendString(dst, d.Hold)
	}
	if d.Domain != "" {
		dst = append(dst, `,"domain":`...)
		dst = jsonwire.AppendString(dst, d.Domain)
		dst = append(dst, `,"descriptors":[`...)
		for i, desc := range d.Descriptors {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"entries":[`...)
			for j, e := range desc.Entries {
				if j > 0 {
					dst = append(dst, ',')
				}
				dst = append(dst, `{"key":`...)
				dst = jsonwire.AppendString(dst, e.Key)
				dst = append(dst, `,"value":`...)
				dst = jsonwire.AppendString(dst, e.Value)
				dst = append(dst, '}')
			}
			dst = append(dst, `],"rule_id":`...)
			dst = jsonwire.AppendString(dst, desc.RuleID)
			dst = append(dst, `,"code":`...)
			dst = jsonwire.AppendString(dst, desc.Code)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	return append(dst, '}')
}

// DecodeDecision parses and validates one ratelimit.decisions message.
// Unknown fields are ignored. event_id, ts, ip, endpoint and reason are
// required; reason must be one of the Reason constants; and the decision
// must be within the limiter's bounds (Validate: the error then wraps a
// *FieldError).
func DecodeDecision(data []byte) (Decision, error) {
	// ts is read as text (the outer field shadows the embedded one) so a
	// missing or malformed ts is reported by name.
	var w struct {
		Decision
		TS string `json:"ts"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return Decision{}, fmt.Errorf("decode decision: %w", err)
	}
	for _, f := range [...]struct{ name, value string }{
		{"event_id", w.EventID}, {"ts", w.TS}, {"ip", w.IP}, {"endpoint", w.Endpoint}, {"reason", w.Reason},
	} {
		if f.value == "" {
			return Decision{}, fmt.Errorf("decode decision: field %q is required", f.name)
		}
	}
	switch w.Reason {
	case ReasonOK, ReasonRateLimited, ReasonBanned, ReasonExempt, ReasonNoRule:
	default:
		return Decision{}, fmt.Errorf("decode decision: field \"reason\": %.32q is not one of ok, rate_limited, banned, exempt, no_rule", w.Reason)
	}
	ts, err := parseTime("ts", w.TS)
	if err != nil {
		return Decision{}, fmt.Errorf("decode decision: %w", err)
	}
	d := w.Decision
	d.TS = ts
	if err := d.Validate(); err != nil {
		return Decision{}, fmt.Errorf("decode decision: %w", err)
	}
	return d, nil
}

func parseTime(field, s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		// %.40q: the text comes from the message, which may be huge.
		return time.Time{}, fmt.Errorf("field %q: %.40q is not an RFC 3339 time", field, s)
	}
	return t.UTC(), nil
}
