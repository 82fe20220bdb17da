package rlsapi

import (
	"strconv"
	"unicode/utf8"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratewarden/ratewarden/internal/jsonwire"
)

// appendResponseJSON appends resp in proto3 JSON, as protojson.Marshal
// writes it but for spacing: the fields the server's answers set (overall
// code, statuses with their code, current limit, units left and time until
// reset, response headers), default values left out, enums by name. It
// reports false, having appended nothing, for a response it cannot write
// as protojson would (a field it does not know set, a string that is not
// UTF-8, a duration out of range): the caller marshals that one with
// protojson. protojson.Marshal, by reflection, was 14 % of the limiter's
// CPU on POST /json.
func appendResponseJSON(dst []byte, resp *rlsv3.RateLimitResponse) ([]byte, bool) {
	if !writable(resp) {
		return dst, false
	}
	n := 0
	dst = append(dst, '{')
	if resp.OverallCode != 0 {
		dst = appendEnum(appendKey(dst, &n, "overallCode"), int32(resp.OverallCode), rlsv3.RateLimitResponse_Code_name)
	}
	if len(resp.Statuses) > 0 {
		dst = append(appendKey(dst, &n, "statuses"), '[')
		for i, st := range resp.Statuses {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendStatus(dst, st)
		}
		dst = append(dst, ']')
	}
	if len(resp.ResponseHeadersToAdd) > 0 {
		dst = append(appendKey(dst, &n, "responseHeadersToAdd"), '[')
		for i, h := range resp.ResponseHeadersToAdd {
			if i > 0 {
				dst = append(dst, ',')
			}
			m := 0
			dst = append(dst, '{')
			if h.Key != "" {
				dst = jsonwire.AppendString(appendKey(dst, &m, "key"), h.Key)
			}
			if h.Value != "" {
				dst = jsonwire.AppendString(appendKey(dst, &m, "value"), h.Value)
			}
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	return append(dst, '}'), true
}

// writable reports whether appendResponseJSON writes resp as protojson
// would.
func writable(resp *rlsv3.RateLimitResponse) bool {
	if len(resp.RequestHeadersToAdd) > 0 || len(resp.RawBody) > 0 || resp.DynamicMetadata != nil || resp.Quota != nil {
		return false
	}
	for _, st := range resp.Statuses {
		if st == nil || !validDuration(st.DurationUntilReset) ||
			(st.CurrentLimit != nil && !utf8.ValidString(st.CurrentLimit.Name)) {
			return false
		}
	}
	for _, h := range resp.ResponseHeadersToAdd {
		if h == nil || len(h.RawValue) > 0 || !utf8.ValidString(h.Key) || !utf8.ValidString(h.Value) {
			return false
		}
	}
	return true
}

func appendStatus(dst []byte, st *rlsv3.RateLimitResponse_DescriptorStatus) []byte {
	n := 0
	dst = append(dst, '{')
	if st.Code != 0 {
		dst = appendEnum(appendKey(dst, &n, "code"), int32(st.Code), rlsv3.RateLimitResponse_Code_name)
	}
	if l := st.CurrentLimit; l != nil {
		m := 0
		dst = append(appendKey(dst, &n, "currentLimit"), '{')
		if l.RequestsPerUnit != 0 {
			dst = strconv.AppendUint(appendKey(dst, &m, "requestsPerUnit"), uint64(l.RequestsPerUnit), 10)
		}
		if l.Unit != 0 {
			dst = appendEnum(appendKey(dst, &m, "unit"), int32(l.Unit), rlsv3.RateLimitResponse_RateLimit_Unit_name)
		}
		if l.Name != "" {
			dst = jsonwire.AppendString(appendKey(dst, &m, "name"), l.Name)
		}
		dst = append(dst, '}')
	}
	if st.LimitRemaining != 0 {
		dst = strconv.AppendUint(appendKey(dst, &n, "limitRemaining"), uint64(st.LimitRemaining), 10)
	}
	if d := st.DurationUntilReset; d != nil {
		dst = appendDuration(appendKey(dst, &n, "durationUntilReset"), d)
	}
	return append(dst, '}')
}

// appendKey appends the n-th member's name and colon, after a comma unless
// it is the first; it counts the member.
func appendKey(dst []byte, n *int, name string) []byte {
	if *n > 0 {
		dst = append(dst, ',')
	}
	*n++
	dst = append(dst, '"')
	dst = append(dst, name...)
	return append(dst, '"', ':')
}

// appendEnum appends an enum value by name, or by number when it has none,
// as protojson does.
func appendEnum(dst []byte, v int32, names map[int32]string) []byte {
	if name, ok := names[v]; ok {
		return jsonwire.AppendString(dst, name)
	}
	return strconv.AppendInt(dst, int64(v), 10)
}

// maxDurationSeconds is the bound of google.protobuf.Duration in JSON
// (10 000 years).
const maxDurationSeconds = 315_576_000_000

// validDuration reports whether protojson can write d: nil, or within the
// bound with seconds and nanos of one sign.
func validDuration(d *durationpb.Duration) bool {
	if d == nil {
		return true
	}
	s, ns := d.Seconds, d.Nanos
	return s >= -maxDurationSeconds && s <= maxDurationSeconds && ns > -1e9 && ns < 1e9 &&
		(s == 0 || ns == 0 || (s < 0) == (ns < 0))
}

// appendDuration appends d as protojson does: seconds with 0, 3, 6 or 9
// fractional digits and an "s", "-" before a negative one.
func appendDuration(dst []byte, d *durationpb.Duration) []byte {
	s, ns := d.Seconds, d.Nanos
	dst = append(dst, '"')
	if s < 0 || ns < 0 {
		dst = append(dst, '-')
		s, ns = -s, -ns
	}
	dst = strconv.AppendInt(dst, s, 10)
	if ns != 0 {
		var buf [10]byte
		frac := strconv.AppendInt(buf[:0], int64(ns)+1e9, 10)[1:] // nine digits
		for len(frac) > 3 && string(frac[len(frac)-3:]) == "000" {
			frac = frac[:len(frac)-3]
		}
		dst = append(append(dst, '.'), frac...)
	}
	return append(dst, 's', '"')
}
