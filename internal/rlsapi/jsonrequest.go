package rlsapi

import (
	"bytes"
	"errors"
	"math"
	"strings"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratewarden/ratewarden/internal/jsonwire"
)

// errNotPlain ends decodeRequestJSON's walk of a body it leaves to protojson.
var errNotPlain = errors.New("not the plain shape")

// decodeRequestJSON reads body into req, which must be empty, when body
// has the plain shape clients send: an object of "domain" (a string),
// "descriptors" (objects of "entries" only, each entry an object of "key"
// and "value" strings) and "hits_addend" (a plain integer), without escapes
// anywhere. For those it reads what protojson.Unmarshal reads; it reports
// false for anything else, however valid (escapes, null, other fields,
// numbers in other forms, duplicate members), and for invalid input (req
// may then hold part of it), leaving the body to protojson, which decides
// it and words any error. protojson.Unmarshal, by reflection, was 12 – 17 %
// of the limiter's CPU on POST /json.
//
// The strings are copied out of the body: a value may outlive the request
// (in a cache key, say), and must not keep up to 64 KiB of body with it.
func decodeRequestJSON(body []byte, req *rlsv3.RateLimitRequest) bool {
	if bytes.IndexByte(body, '\\') >= 0 {
		return false // protojson reads escapes its own way (a lone surrogate is an error)
	}
	p := jsonwire.New(body)
	var seenDomain, seenDescriptors, seenHits bool
	err := p.Object(func(name string) error {
		switch {
		case name == "domain" && !seenDomain:
			seenDomain = true
			return plainString(&p, &req.Domain)
		case name == "descriptors" && !seenDescriptors:
			seenDescriptors = true
			return p.Array(func(int) error {
				desc := new(rlcommon.RateLimitDescriptor)
				req.Descriptors = append(req.Descriptors, desc)
				return decodeDescriptor(&p, desc)
			})
		case (name == "hits_addend" || name == "hitsAddend") && !seenHits:
			seenHits = true
			if c := p.Peek(); c < '0' || c > '9' {
				return errNotPlain // null, a quoted or negative number
			}
			n, err := p.Integer()
			if err != nil || n > math.MaxUint32 {
				return errNotPlain
			}
			req.HitsAddend = uint32(n)
			return nil
		}
		return errNotPlain
	})
	return err == nil && p.End() == nil
}

// decodeDescriptor reads an object of "entries" into desc.
func decodeDescriptor(p *jsonwire.Parser, desc *rlcommon.RateLimitDescriptor) error {
	seen := false
	return p.Object(func(name string) error {
		if name != "entries" || seen {
			return errNotPlain
		}
		seen = true
		return p.Array(func(int) error {
			e := new(rlcommon.RateLimitDescriptor_Entry)
			desc.Entries = append(desc.Entries, e)
			var seenKey, seenValue bool
			return p.Object(func(name string) error {
				switch {
				case name == "key" && !seenKey:
					seenKey = true
					return plainString(p, &e.Key)
				case name == "value" && !seenValue:
					seenValue = true
					return plainString(p, &e.Value)
				}
				return errNotPlain
			})
		})
	})
}

// plainString reads a string (not null) into dst, copied out of the body.
func plainString(p *jsonwire.Parser, dst *string) error {
	s, err := p.Str()
	*dst = strings.Clone(s)
	return err
}
