package rlsapi

import (
	"fmt"
	"math"
	"net/netip"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratewarden/ratewarden/internal/endpoint"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/ipprefix"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// MaxHitsAddend bounds a descriptor's hits_addend: the range of the
// request's own hits_addend (a uint32), so either field means the same
// costs. A descriptor's field is a uint64 on the wire; a larger value is a
// client's mistake (no limit admits it), refused rather than wrapped.
const MaxHitsAddend = math.MaxUint32

// The fields an invalid request is counted under in
// rate_limit_rls_invalid_requests_total: a fixed set, whatever the request
// holds. body is a /json body that is too large or not a RateLimitRequest.
const (
	fieldDomain      = "domain"
	fieldDescriptors = "descriptors"
	fieldEntries     = "entries"
	fieldKey         = "key"
	fieldValue       = "value"
	fieldHitsAddend  = "hits_addend"
	fieldLimit       = "limit"
	fieldBody        = "body"
)

var invalidFields = []string{fieldDomain, fieldDescriptors, fieldEntries, fieldKey, fieldValue, fieldHitsAddend, fieldLimit, fieldBody}

// invalidError is a request outside the bounds: InvalidArgument over gRPC,
// 400 over /json. field is the metric label, msg names the field in full
// ("descriptors[2].entries[0].key: empty").
type invalidError struct {
	field, msg string
}

func (e *invalidError) Error() string { return e.msg }

func invalid(field, format string, args ...any) *invalidError {
	return &invalidError{field: field, msg: fmt.Sprintf(format, args...)}
}

// call is what one decision needs besides the answer, recycled through
// Server.calls: the request in the engine's terms, the backing array of
// its entries, and the decision.
type call struct {
	req     rules.DescriptorRequest
	entries []rules.Entry
	d       limiter.Decision
}

// release drops the references to the request's strings before the call
// goes back to the pool, so a pooled call does not keep a request alive.
func (c *call) release() {
	clear(c.entries)
	c.entries = c.entries[:0]
	clear(c.req.Descriptors)
	c.req = rules.DescriptorRequest{Descriptors: c.req.Descriptors[:0]}
}

// convert checks in against event's bounds (the limiter's events and
// Redis keys stay within them) and fills c.req:
//   - domain: 1 to event.MaxDomain bytes;
//   - descriptors: 1 to event.MaxDescriptors, each of 1 to event.MaxEntries
//     entries;
//   - key: 1 to event.MaxDescriptorKey bytes, as Envoy's proto requires;
//     value: 0 to event.MaxDescriptorValue bytes: the proto allows an
//     empty value (blank values became wildcards of Envoy's local rate
//     limiting) and envoyproxy/ratelimit accepts it, so a gateway may send
//     one; it matches a rule level without value like any other value;
//   - every string valid UTF-8 without control characters, and all keys
//     and values together at most event.MaxDescriptorBytes;
//   - a descriptor's hits_addend at most MaxHitsAddend;
//   - a descriptor's limit of a known unit.
//
// The cost of a descriptor is its hits_addend when set (0: checked without
// counting), else the request's hits_addend, else 1. A descriptor's limit
// decides it in place of the rules, as envoyproxy/ratelimit applies it
// (rules.DescriptorLimit), when its domain has rules.
func (s *Server) convert(in *rlsv3.RateLimitRequest, c *call) *invalidError {
	domain := in.GetDomain()
	switch {
	case domain == "":
		return invalid(fieldDomain, "domain: required")
	case len(domain) > event.MaxDomain:
		return invalid(fieldDomain, "domain: longer than %d bytes", event.MaxDomain)
	case !event.ValidDescriptorText(domain, event.MaxDomain):
		return invalid(fieldDomain, "domain: not UTF-8 without control characters")
	}
	descs := in.GetDescriptors()
	switch {
	case len(descs) == 0:
		return invalid(fieldDescriptors, "descriptors: at least one required")
	case len(descs) > event.MaxDescriptors:
		return invalid(fieldDescriptors, "descriptors: %d, at most %d", len(descs), event.MaxDescriptors)
	}
	total, n := 0, 0
	for i, d := range descs {
		entries := d.GetEntries()
		switch {
		case len(entries) == 0:
			return invalid(fieldEntries, "descriptors[%d].entries: at least one required", i)
		case len(entries) > event.MaxEntries:
			return invalid(fieldEntries, "descriptors[%d].entries: %d, at most %d", i, len(entries), event.MaxEntries)
		}
		n += len(entries)
		for j, e := range entries {
			if err := checkEntry(i, j, e.GetKey(), e.GetValue()); err != nil {
				return err
			}
			total += len(e.GetKey()) + len(e.GetValue())
		}
		if h := d.GetHitsAddend(); h != nil && h.GetValue() > MaxHitsAddend {
			return invalid(fieldHitsAddend, "descriptors[%d].hits_addend: %d, at most %d", i, h.GetValue(), uint64(MaxHitsAddend))
		}
		if l := d.GetLimit(); l != nil && unitDurations[l.GetUnit()] == 0 {
			return invalid(fieldLimit, "descriptors[%d].limit.unit: %s, want SECOND, MINUTE, HOUR, DAY, MONTH or YEAR", i, l.GetUnit())
		}
	}
	if total > event.MaxDescriptorBytes {
		return invalid(fieldDescriptors, "descriptors: keys and values add up to %d bytes, at most %d", total, event.MaxDescriptorBytes)
	}

	cost := int64(1)
	if h := in.GetHitsAddend(); h != 0 { // 0 is the proto's "not set"
		cost = int64(h)
	}
	if cap(c.entries) < n {
		c.entries = make([]rules.Entry, 0, n)
	}
	req := &c.req
	req.Domain = domain
	req.AddressKey = s.cfg.AddressKey
	var addr, path, method string
	var hasAddr, hasEndpoint, hasMethod bool
	for _, d := range descs {
		start := len(c.entries)
		for _, e := range d.GetEntries() {
			k, v := e.GetKey(), e.GetValue()
			c.entries = append(c.entries, rules.Entry{Key: k, Value: v})
			switch {
			case !hasAddr && k == s.cfg.AddressKey:
				addr, hasAddr = v, true
			case !hasEndpoint && k == s.cfg.EndpointKey:
				path, hasEndpoint = v, true
			case !hasMethod && k == s.cfg.MethodKey:
				method, hasMethod = v, true
			}
		}
		dc := cost
		if h := d.GetHitsAddend(); h != nil {
			dc = int64(h.GetValue())
		}
		rd := rules.Descriptor{Entries: c.entries[start:len(c.entries):len(c.entries)], Cost: dc}
		if l := d.GetLimit(); l != nil {
			rd.Limit = &rules.DescriptorLimit{Requests: int64(l.GetRequestsPerUnit()), Per: unitDurations[l.GetUnit()]}
		}
		req.Descriptors = append(req.Descriptors, rd)
	}
	if hasAddr {
		req.IP, req.Addr = clientAddr(addr)
	}
	req.Endpoint = "/"
	if hasEndpoint {
		req.Endpoint = event.EscapeEndpoint(endpoint.Normalize(path))
	}
	if hasMethod && event.ValidMethod(method) {
		req.Method = strings.ToUpper(method)
	}
	return nil
}

func checkEntry(i, j int, key, value string) *invalidError {
	switch {
	case key == "":
		return invalid(fieldKey, "descriptors[%d].entries[%d].key: empty", i, j)
	case len(key) > event.MaxDescriptorKey:
		return invalid(fieldKey, "descriptors[%d].entries[%d].key: longer than %d bytes", i, j, event.MaxDescriptorKey)
	case !event.ValidDescriptorText(key, event.MaxDescriptorKey):
		return invalid(fieldKey, "descriptors[%d].entries[%d].key: not UTF-8 without control characters", i, j)
	case len(value) > event.MaxDescriptorValue:
		return invalid(fieldValue, "descriptors[%d].entries[%d].value: longer than %d bytes", i, j, event.MaxDescriptorValue)
	case !event.ValidDescriptorText(value, event.MaxDescriptorValue):
		return invalid(fieldValue, "descriptors[%d].entries[%d].value: not UTF-8 without control characters", i, j)
	}
	return nil
}

// clientAddr parses the value of the address entry: an IP address, an
// IPv4-mapped IPv6 one taken as IPv4. Anything else, an address with a
// zone included, is no address: the request is then decided without bans
// or exemptions by address, and its event carries the unspecified address.
func clientAddr(v string) (string, netip.Addr) {
	a, err := netip.ParseAddr(v)
	if err != nil || a.Zone() != "" {
		return "", netip.Addr{}
	}
	a = ipprefix.Client(a)
	var buf [64]byte // more than the longest form
	if string(a.AppendTo(buf[:0])) == v {
		return v, a // the value is in canonical form, as Envoy sends addresses: no new string
	}
	return a.String(), a
}
