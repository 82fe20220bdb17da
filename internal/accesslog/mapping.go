// Package accesslog turns one line of a gateway's JSON access log, as a
// shipper put it on a Kafka topic, into an event.Outcome: the same message
// the limiter's POST /v1/report produces, so the detector can count the
// failures of gateways that never call the limiter after a response.
//
// It is pure: no I/O, no clock. The caller reads the topic, passes each
// message's value with where it came from (Source), and counts and skips
// the lines Parse refuses.
package accesslog

import (
	"fmt"
	"strings"
)

// Mapping names the JSON field of an access-log line each part of an
// outcome comes from. Its text form (ParseMapping, String) is a
// comma-separated list of key=field pairs, keys as below. An empty field
// turns an optional key off.
type Mapping struct {
	// IP is the field of the client address, one IP address ("ip";
	// required). Map it to the address nginx saw ($remote_addr, set from
	// X-Forwarded-For by the realip module behind a load balancer), never
	// to a header a client can write.
	IP string
	// User is the field of the user id ("user"; optional).
	User string
	// Path is the field of the request URI ("path"; required): the query
	// string is dropped and the path normalized as the limiter normalizes
	// endpoints.
	Path string
	// Method is the field of the HTTP method ("method"; optional: GET when
	// off or absent, as the limiter's API defaults it).
	Method string
	// Status is the field of the HTTP status the client got ("status";
	// required, 100 to 599).
	Status string
	// Bytes is the field of the response body's size ("bytes"; optional).
	// It is read only when Cost is CostFromBytes: then the outcome's cost
	// is the bytes sent, for rules that budget bandwidth.
	Bytes string
	// Cost is the field of the units the request used, an integer ≥ 0
	// ("cost"; optional: 1 when off or absent), or CostFromBytes.
	Cost string
	// Time is the field of the request's time ("time"; optional): RFC 3339
	// ($time_iso8601), seconds since the epoch with a fraction ($msec) or
	// nginx's $time_local. When off, absent or unparsable, the Kafka
	// message's timestamp is used.
	Time string
	// Tier is the field of the user's tier ("tier"; optional, off by
	// default: gateways rarely know it).
	Tier string
}

// CostFromBytes, as the cost key's value ("cost=bytes"), makes the bytes
// field the outcome's cost. It names the bytes key, not a JSON field called
// "bytes" (map bytes=bytes to read one).
const CostFromBytes = "bytes"

// DefaultMappingText is the mapping of deploy/gateways/nginx/access-log.conf,
// whose JSON keys are the names of the nginx variables they hold.
const DefaultMappingText = "ip=remote_addr,user=upstream_http_x_user_id,path=request_uri,method=request_method," +
	"status=status,bytes=body_bytes_sent,cost=upstream_http_x_cost,time=msec,tier="

// DefaultMapping returns the mapping of DefaultMappingText.
func DefaultMapping() Mapping {
	return Mapping{
		IP: "remote_addr", User: "upstream_http_x_user_id", Path: "request_uri", Method: "request_method",
		Status: "status", Bytes: "body_bytes_sent", Cost: "upstream_http_x_cost", Time: "msec",
	}
}

// mappingKey is one key of the text form and the field of Mapping it sets.
type mappingKey struct {
	name     string
	required bool
	field    func(*Mapping) *string
}

var mappingKeys = []mappingKey{
	{"ip", true, func(m *Mapping) *string { return &m.IP }},
	{"user", false, func(m *Mapping) *string { return &m.User }},
	{"path", true, func(m *Mapping) *string { return &m.Path }},
	{"method", false, func(m *Mapping) *string { return &m.Method }},
	{"status", true, func(m *Mapping) *string { return &m.Status }},
	{"bytes", false, func(m *Mapping) *string { return &m.Bytes }},
	{"cost", false, func(m *Mapping) *string { return &m.Cost }},
	{"time", false, func(m *Mapping) *string { return &m.Time }},
	{"tier", false, func(m *Mapping) *string { return &m.Tier }},
}

// MappingKeys lists the keys of the text form, in String's order.
func MappingKeys() []string {
	out := make([]string, len(mappingKeys))
	for i, k := range mappingKeys {
		out[i] = k.name
	}
	return out
}

// ParseMapping parses the text form of a mapping: comma-separated
// key=field pairs, spaces around them ignored. Keys not given keep their
// value in DefaultMapping, so "user=remote_user" changes only the user
// field; "cost=" turns an optional key off. A key given twice, an unknown
// key, a pair without '=', a required key (ip, path, status) left empty,
// and cost=bytes with bytes off are errors.
func ParseMapping(text string) (Mapping, error) {
	m := DefaultMapping()
	seen := map[string]bool{}
	for pair := range strings.SplitSeq(text, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		name, value, ok := strings.Cut(pair, "=")
		if !ok {
			return Mapping{}, fmt.Errorf("%q: want key=field", pair)
		}
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		k, found := lookupKey(name)
		if !found {
			return Mapping{}, fmt.Errorf("unknown key %q (keys: %s)", name, strings.Join(MappingKeys(), ", "))
		}
		if seen[name] {
			return Mapping{}, fmt.Errorf("key %q given twice", name)
		}
		seen[name] = true
		*k.field(&m) = value
	}
	if err := m.check(); err != nil {
		return Mapping{}, err
	}
	return m, nil
}

func lookupKey(name string) (mappingKey, bool) {
	for _, k := range mappingKeys {
		if k.name == name {
			return k, true
		}
	}
	return mappingKey{}, false
}

// check reports a required key without a field, or cost=bytes without a
// bytes field.
func (m *Mapping) check() error {
	for _, k := range mappingKeys {
		if k.required && *k.field(m) == "" {
			return fmt.Errorf("key %q needs a field", k.name)
		}
	}
	if m.Cost == CostFromBytes && m.Bytes == "" {
		return fmt.Errorf("cost=%s takes the bytes field, but bytes is off", CostFromBytes)
	}
	return nil
}

// String returns the text form of m with every key, in MappingKeys order;
// ParseMapping(m.String()) returns m.
func (m Mapping) String() string {
	var b strings.Builder
	for i, k := range mappingKeys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k.name)
		b.WriteByte('=')
		b.WriteString(*k.field(&m))
	}
	return b.String()
}
