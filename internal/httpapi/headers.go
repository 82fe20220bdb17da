package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/limiter"
)

// rateLimitHeaders are the IETF httpapi RateLimit-Policy and RateLimit
// fields, the X-RateLimit-* fields and, when denied, Retry-After, encoded
// into one buffer: header i is names[i] with the value b[ends[i-1]:ends[i]].
// They describe the most constrained enforced limit; RateLimit-Policy lists
// every enforced limit that applied. Shadow rules never appear, and a
// decision without an enforced rule (exempt, no_rule) carries none, but a
// ban carries Retry-After.
type rateLimitHeaders struct {
	buf   [512]byte
	b     []byte
	ends  [6]int
	names []string
	keys  [][]byte // names as bytes (limitHeaderKeys)
}

var (
	limitHeaderNames = []string{"Ratelimit-Policy", "Ratelimit", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Retry-After"}
	retryAfterOnly   = limitHeaderNames[5:]
	// limitHeaderKeys are limitHeaderNames as bytes, for fasthttp's
	// SetCanonical.
	limitHeaderKeys = func() [][]byte {
		keys := make([][]byte, len(limitHeaderNames))
		for i, n := range limitHeaderNames {
			keys[i] = []byte(n)
		}
		return keys
	}()
)

// maxPolicyBytes bounds RateLimit-Policy: past it, the policies of the
// other limits that applied are left out, and only the binding one's is
// listed still. Nothing else bounds how many rules apply to a request (200
// rules of 8 limits made a 142 KB header, over what nginx's or this
// server's own header buffers take, and 14 MB answers to a batch asking
// for headers); 4 KiB lists about 60 policies.
const maxPolicyBytes = 4 << 10

// encode fills rh from d.
func (rh *rateLimitHeaders) encode(d *limiter.Decision) {
	b := rh.buf[:0]
	applied, res, ok := d.EnforcedLimit()
	if !ok {
		rh.names, rh.keys = nil, nil
		if !d.Allowed && d.RetryAfter > 0 { // banned: no limit to describe, but a time to come back
			rh.b = strconv.AppendInt(b, ceilSeconds(d.RetryAfter), 10)
			rh.ends[0] = len(rh.b)
			rh.names, rh.keys = retryAfterOnly, limitHeaderKeys[5:]
		}
		return
	}
	bindingIndex := 0
	if res.LimitIndex >= 0 && res.LimitIndex < len(applied.Call.Limits) {
		bindingIndex = res.LimitIndex
	}
	for i := range d.Applied {
		a := &d.Applied[i]
		if a.Rule.Shadow {
			continue
		}
		for j, l := range a.Call.Limits {
			n := len(b)
			if n > 0 {
				b = append(b, ", "...)
			}
			b = appendPolicyName(b, a.Rule.ID, l)
			b = append(b, ";q="...)
			b = strconv.AppendInt(b, l.Quota(), 10)
			b = append(b, ";w="...)
			b = strconv.AppendInt(b, ceilSeconds(window(l)), 10)
			if len(b) > maxPolicyBytes && !(i == d.Enforced && j == bindingIndex) {
				b = b[:n] // past the bound: only the binding limit is listed still
			}
		}
	}
	rh.ends[0] = len(b)

	binding := applied.Call.Limits[bindingIndex]
	reset := ceilSeconds(res.ResetAfter)
	b = appendPolicyName(b, applied.Rule.ID, binding)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, res.Remaining, 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, reset, 10)
	rh.ends[1] = len(b)
	b = strconv.AppendInt(b, res.Limit, 10)
	rh.ends[2] = len(b)
	b = strconv.AppendInt(b, res.Remaining, 10)
	rh.ends[3] = len(b)
	b = strconv.AppendInt(b, reset, 10)
	rh.ends[4] = len(b)
	rh.names, rh.keys = limitHeaderNames[:5], limitHeaderKeys[:5]
	if !d.Allowed {
		b = strconv.AppendInt(b, max(ceilSeconds(d.RetryAfter), 1), 10)
		rh.ends[5] = len(b)
		rh.names, rh.keys = limitHeaderNames, limitHeaderKeys
	}
	rh.b = b
}

// setCanonical sets every header of rh on h. The names are in fasthttp's
// canonical form already (limitHeaderNames), so they go in as they are,
// with no normalizing copy each.
func (rh *rateLimitHeaders) setCanonical(h *fasthttp.ResponseHeader) {
	start := 0
	for i := range rh.names {
		h.SetCanonical(rh.keys[i], rh.b[start:rh.ends[i]])
		start = rh.ends[i]
	}
}

// each calls set with every header of rh, name and value, in order.
func (rh *rateLimitHeaders) each(set func(name string, value []byte)) {
	start := 0
	for i, name := range rh.names {
		set(name, rh.b[start:rh.ends[i]])
		start = rh.ends[i]
	}
}

// setRateLimitHeaders writes d's rate-limit headers into h: one string and
// one slice of values in all.
func setRateLimitHeaders(h http.Header, d *limiter.Decision) {
	var rh rateLimitHeaders
	rh.encode(d)
	if len(rh.names) == 0 {
		return
	}
	all := string(rh.b)
	vals := make([]string, len(rh.names))
	start := 0
	for i, name := range rh.names {
		vals[i] = all[start:rh.ends[i]]
		h[name] = vals[i : i+1 : i+1]
		start = rh.ends[i]
	}
}

// appendPolicyName appends a quoted policy name, rule id and window, such as
// "login-per-ip/1s". Rule ids are restricted to characters that need no
// escaping in a structured-field string.
func appendPolicyName(b []byte, ruleID string, l decide.Limit) []byte {
	b = append(b, '"')
	b = append(b, ruleID...)
	b = append(b, '/')
	b = appendDuration(b, l.Per)
	return append(b, '"')
}

// appendDuration writes d compactly in its largest whole unit: 1h, 5m, 10s,
// 500ms.
func appendDuration(b []byte, d time.Duration) []byte {
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if d%u.unit == 0 {
			return append(strconv.AppendInt(b, int64(d/u.unit), 10), u.name...)
		}
	}
	return append(strconv.AppendInt(b, d.Milliseconds(), 10), "ms"...)
}

// window is the time over which a limit's quota applies: its period, or for
// a token bucket the time to refill the whole burst.
func window(l decide.Limit) time.Duration {
	if l.Rate > 0 {
		return time.Duration((int64(l.Per)*l.Burst + l.Rate - 1) / l.Rate)
	}
	return l.Per
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
