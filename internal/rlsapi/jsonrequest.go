package rlsapi

import (
	"unicode/utf8"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// decodeRequestJSON reads body into req, which must be empty, when body
// has the plain shape clients send: an object of "domain" (a string),
// "descriptors" (objects of "entries" only, each entry an object of "key"
// and "value" strings) and "hits_addend" (a plain integer), strings
// without escapes. For those it reads what protojson.Unmarshal reads; it
// reports false for anything else, however valid (escapes, null, other
// fields, numbers in other forms, duplicate members), and for invalid
// input (req may then hold part of it), leaving the body to protojson,
// which decides it and words any error. protojson.Unmarshal, by
// reflection, was 12 – 17 % of the limiter's CPU on POST /json.
func decodeRequestJSON(body []byte, req *rlsv3.RateLimitRequest) bool {
	d := jsonScanner{b: body}
	var seenDomain, seenDescriptors, seenHits bool
	ok := d.object(func(name []byte) bool {
		switch string(name) {
		case "domain":
			if seenDomain {
				return false
			}
			seenDomain = true
			s, ok := d.str()
			req.Domain = string(s)
			return ok
		case "descriptors":
			if seenDescriptors {
				return false
			}
			seenDescriptors = true
			return d.array(func() bool {
				desc := new(rlcommon.RateLimitDescriptor)
				req.Descriptors = append(req.Descriptors, desc)
				return d.descriptor(desc)
			})
		case "hits_addend", "hitsAddend":
			if seenHits {
				return false
			}
			seenHits = true
			n, ok := d.uint32()
			req.HitsAddend = n
			return ok
		}
		return false
	})
	d.space()
	return ok && d.i == len(d.b)
}

// descriptor reads an object of "entries" into desc.
func (d *jsonScanner) descriptor(desc *rlcommon.RateLimitDescriptor) bool {
	seen := false
	return d.object(func(name []byte) bool {
		if string(name) != "entries" || seen {
			return false
		}
		seen = true
		return d.array(func() bool {
			e := new(rlcommon.RateLimitDescriptor_Entry)
			desc.Entries = append(desc.Entries, e)
			var seenKey, seenValue bool
			return d.object(func(name []byte) bool {
				var dst *string
				switch {
				case string(name) == "key" && !seenKey:
					seenKey, dst = true, &e.Key
				case string(name) == "value" && !seenValue:
					seenValue, dst = true, &e.Value
				default:
					return false
				}
				s, ok := d.str()
				*dst = string(s)
				return ok
			})
		})
	})
}

// jsonScanner reads the plain JSON decodeRequestJSON takes.
type jsonScanner struct {
	b []byte
	i int
}

// space skips JSON's whitespace.
func (d *jsonScanner) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// next skips whitespace and consumes c if it comes next.
func (d *jsonScanner) next(c byte) bool {
	d.space()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// object reads an object, calling member with each member's name to read
// its value.
func (d *jsonScanner) object(member func(name []byte) bool) bool {
	if !d.next('{') {
		return false
	}
	if d.next('}') {
		return true
	}
	for {
		name, ok := d.str()
		if !ok || !d.next(':') || !member(name) {
			return false
		}
		if d.next('}') {
			return true
		}
		if !d.next(',') {
			return false
		}
	}
}

// array reads an array, calling elem to read each element.
func (d *jsonScanner) array(elem func() bool) bool {
	if !d.next('[') {
		return false
	}
	if d.next(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if d.next(']') {
			return true
		}
		if !d.next(',') {
			return false
		}
	}
}

// str reads a string without escapes or control characters, valid UTF-8,
// and returns its contents (in the body).
func (d *jsonScanner) str() ([]byte, bool) {
	if !d.next('"') {
		return nil, false
	}
	start := d.i
	for d.i < len(d.b) {
		switch c := d.b[d.i]; {
		case c == '"':
			s := d.b[start:d.i]
			d.i++
			return s, utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return nil, false
		}
		d.i++
	}
	return nil, false
}

// uint32 reads a plain integer (digits, no leading zero) of at most
// 4294967295.
func (d *jsonScanner) uint32() (uint32, bool) {
	d.space()
	start := d.i
	var n uint64
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		n = n*10 + uint64(d.b[d.i]-'0')
		d.i++
		if n > 1<<32-1 {
			return 0, false
		}
	}
	digits := d.i - start
	if digits == 0 || (digits > 1 && d.b[start] == '0') {
		return 0, false
	}
	// a fraction or an exponent would make it another number
	if d.i < len(d.b) && (d.b[d.i] == '.' || d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		return 0, false
	}
	return uint32(n), true
}
