package client

import "net/http"

// The rate-limit headers the limiter sets on a decision's answer, which
// the middleware gives the application's clients as they are. The names
// are in canonical form (http.CanonicalHeaderKey), since the middleware
// sets them into an http.Header directly: in any other, Header.Get would
// not find them and Header.Set would add a second field.
var limitHeaderNames = [...]string{"Ratelimit-Policy", "Ratelimit", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Retry-After"}

// rateLimitHeaders are the values of limitHeaderNames in one string:
// one allocation per decision whatever their number.
type rateLimitHeaders struct {
	all string
	end [len(limitHeaderNames)]uint16 // value i is all[end[i-1]:end[i]]
}

// readLimitHeaders copies the rate-limit headers of an answer.
func readLimitHeaders(h http.Header, buf []byte) (rateLimitHeaders, []byte) {
	var r rateLimitHeaders
	buf = buf[:0]
	for i, name := range limitHeaderNames {
		var v string
		if vs := h[name]; len(vs) > 0 {
			v = vs[0]
		}
		if len(buf)+len(v) > 0xffff {
			v = "" // a header of 64 KiB is no rate-limit header
		}
		buf = append(buf, v...)
		r.end[i] = uint16(len(buf))
	}
	if len(buf) > 0 {
		r.all = string(buf)
	}
	return r, buf
}

// setOn sets the headers that have a value on h, their values sharing one
// slice (one allocation, not one per header).
func (r *rateLimitHeaders) setOn(h map[string][]string) {
	if r.all == "" {
		return
	}
	vals := make([]string, 0, len(limitHeaderNames))
	r.each(func(i int, value string) {
		vals = append(vals, value)
		h[limitHeaderNames[i]] = vals[len(vals)-1 : len(vals) : len(vals)]
	})
}

// each calls set with every header that has a value: its index in
// limitHeaderNames and the value.
func (r *rateLimitHeaders) each(set func(i int, value string)) {
	start := uint16(0)
	for i := range limitHeaderNames {
		if end := r.end[i]; end > start {
			set(i, r.all[start:end])
			start = end
		}
	}
}

// EachRateLimitHeader calls set with each rate-limit header of the
// limiter's answer that has a value, in canonical form (Ratelimit-Policy,
// Ratelimit, X-Ratelimit-Limit, X-Ratelimit-Remaining, X-Ratelimit-Reset,
// Retry-After), as Middleware gives them to the application's clients. A
// Decision the limiter did not make has none.
func (d *Decision) EachRateLimitHeader(set func(name, value string)) {
	d.headers.each(func(i int, value string) { set(limitHeaderNames[i], value) })
}
