package main

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// jsonPath is envoyproxy/ratelimit's HTTP endpoint, which the limiter
// serves too (docs/envoy.md): a RateLimitRequest in
// proto3 JSON, answered with the RateLimitResponse, 200 when the overall
// code is OK and 429 when it is OVER_LIMIT.
const jsonPath = "/json"

// rlsJSON writes the bodies of POST /json: a request in its domain with one
// descriptor of the configured entries, as -protocol grpc sends them.
type rlsJSON struct {
	head   []byte   // up to the first entry
	fields []string // the key of each entry
}

func newRLSJSON(domain string, fields []string) rlsJSON {
	d, _ := json.Marshal(domain) // a string always encodes
	return rlsJSON{head: []byte(`{"domain":` + string(d) + `,"descriptors":[{"entries":[`), fields: fields}
}

// appendBody appends the request carrying d to dst; it does not allocate
// when dst has room. The entry keys are fixed names and the values are
// generated from characters JSON takes as they are (a -endpoint override
// comes escaped), as in Draw.AppendJSON.
func (r rlsJSON) appendBody(d *Draw, dst []byte) []byte {
	dst = append(dst, r.head...)
	for i, k := range r.fields {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"key":"`...)
		dst = append(dst, k...)
		dst = append(dst, `","value":"`...)
		switch k {
		case entryRemoteAddress:
			dst = append(dst, d.IP...)
		case entryPath:
			dst = d.appendEndpointJSON(dst)
		case entryMethod:
			dst = append(dst, d.Method...)
		}
		dst = append(dst, `"}`...)
	}
	dst = append(dst, "]}]"...)
	if d.Cost != 0 {
		dst = append(dst, `,"hits_addend":`...)
		dst = strconv.AppendInt(dst, int64(d.Cost), 10)
	}
	return append(dst, '}')
}

// classifyRLSJSON turns an answer of POST /json into an outcome: 200 with
// an overall code OK is allowed, 429 denied (OVER_LIMIT, whatever the
// cause); other statuses are errors by class, as for /v1/check.
func classifyRLSJSON(o *outcome, res response) {
	o.answered = true
	o.status = res.status
	switch res.status {
	case 200:
		if bytes.HasPrefix(memberValue(res.body, `"overallCode"`), []byte(`"OK"`)) {
			o.allowed, o.reason = true, reasonOK
		} else {
			o.err = errBody
		}
	case 429:
		o.allowed, o.reason = false, reasonOverLimit
	default:
		classifyStatus(o, res.status)
	}
}
