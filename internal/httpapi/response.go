package httpapi

import (
	"strconv"

	"github.com/ratewarden/ratewarden/internal/limiter"
)

// appendDecision encodes the answer to a decision (docs/api.md "POST /v1/check")
// without reflection. Every string in it comes from the configuration (rule
// ids are restricted to [A-Za-z0-9._-]), from constants or from a UUID, so
// none needs escaping.
func appendDecision(b []byte, d *limiter.Decision) []byte {
	b = append(b, '{')
	return append(appendDecisionFields(b, d), "}\n"...)
}

// appendDecisionFields is appendDecision's object without its braces.
func appendDecisionFields(b []byte, d *limiter.Decision) []byte {
	b = append(b, `"allowed":`...)
	b = strconv.AppendBool(b, d.Allowed)
	b = append(b, `,"reason":"`...)
	b = append(b, d.Reason...)
	b = append(b, `","rule_id":"`...)
	b = append(b, d.RuleID...)
	b = append(b, `","algorithm":"`...)
	b = append(b, d.Algorithm...)
	b = append(b, `","limit":`...)
	b = strconv.AppendInt(b, d.Limit, 10)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, d.Remaining, 10)
	b = append(b, `,"reset_after_ms":`...)
	b = strconv.AppendInt(b, d.ResetAfter.Milliseconds(), 10)
	b = append(b, `,"retry_after_ms":`...)
	b = strconv.AppendInt(b, d.RetryAfter.Milliseconds(), 10)
	b = append(b, `,"mode":"`...)
	b = append(b, d.Mode...)
	b = append(b, `","shadow":`...)
	b = strconv.AppendBool(b, d.Shadow)
	b = append(b, `,"event_id":"`...)
	b = append(b, d.EventID...)
	if d.Hold != "" { // base64url: no escapes
		b = append(b, `","hold":"`...)
		b = append(b, d.Hold...)
	}
	return append(b, '"')
}

// appendBatch encodes the answer to a batch (docs/api.md "POST
// /v1/check/batch"): each decision as appendDecision's object with the
// status a single check would have had, 200, or 503 and its error; with
// headers, each 200 also with the rate-limit headers /v1/check would have
// set, in "headers".
func appendBatch(b []byte, ds []limiter.Decision, headers bool) []byte {
	b = append(b, `{"decisions":[`...)
	for i := range ds {
		if i > 0 {
			b = append(b, ',')
		}
		d := &ds[i]
		if d.Unavailable {
			b = append(b, `{"status":503,`...)
			b = append(appendUnavailableFields(b, d), '}')
			continue
		}
		b = append(b, `{"status":200,`...)
		b = appendDecisionFields(b, d)
		if headers {
			b = appendHeaders(b, d)
		}
		b = append(b, '}')
	}
	return append(b, "]}\n"...)
}

// appendHeaders appends the "headers" field of a batch's decision: an
// object of the rate-limit headers /v1/check sets for d, by their
// canonical names ({} when it sets none). Their values hold rule ids,
// digits and the policies' quotes: only the quotes need escaping.
func appendHeaders(b []byte, d *limiter.Decision) []byte {
	var rh rateLimitHeaders
	rh.encode(d)
	b = append(b, `,"headers":{`...)
	first := true
	rh.each(func(name string, value []byte) {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, `":"`...)
		for _, c := range value {
			if c == '"' || c == '\\' {
				b = append(b, '\\')
			}
			b = append(b, c)
		}
		b = append(b, '"')
	})
	return append(b, '}')
}

// unavailable is the 503 answer to a decision a deny-policy rule could not
// make.
func unavailable(d *limiter.Decision) []byte {
	b := make([]byte, 0, 192)
	b = append(b, '{')
	return append(appendUnavailableFields(b, d), "}\n"...)
}

// appendUnavailableFields is unavailable's object without its braces: the
// error, and the rule with its failure policy, which tell a client (the Go
// client) that the rule refused the request by its own policy, where a
// bare 503 would be a limiter down, or a proxy's.
func appendUnavailableFields(b []byte, d *limiter.Decision) []byte {
	// A rule id and constants: no escapes.
	b = append(b, `"error":"rule `...)
	b = append(b, d.RuleID...)
	b = append(b, ` cannot be decided: redis unavailable and its failure policy is deny","rule_id":"`...)
	b = append(b, d.RuleID...)
	return append(b, `","on_redis_failure":"deny"`...)
}
