package rlsapi

import (
	"fmt"
	"maps"
	"math"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/rules"
)

func TestPerUnit(t *testing.T) {
	const (
		day  = 24 * time.Hour
		year = 365 * day
	)
	tests := []struct {
		n    int64
		per  time.Duration
		want uint32
		unit rlsv3.RateLimitResponse_RateLimit_Unit
	}{
		{100, time.Minute, 100, rlsv3.RateLimitResponse_RateLimit_MINUTE},
		{5, time.Second, 5, rlsv3.RateLimitResponse_RateLimit_SECOND},
		{1, time.Hour, 1, rlsv3.RateLimitResponse_RateLimit_HOUR},
		{7, day, 7, rlsv3.RateLimitResponse_RateLimit_DAY},
		{7, 7 * day, 7, rlsv3.RateLimitResponse_RateLimit_WEEK},
		{1, 30 * day, 1, rlsv3.RateLimitResponse_RateLimit_MONTH},
		{1, year, 1, rlsv3.RateLimitResponse_RateLimit_YEAR},
		{0, time.Second, 0, rlsv3.RateLimitResponse_RateLimit_SECOND},      // a blocking rule
		{0, 10 * time.Minute, 0, rlsv3.RateLimitResponse_RateLimit_MINUTE}, // the largest unit below
		{100, 10 * time.Minute, 10, rlsv3.RateLimitResponse_RateLimit_MINUTE},
		{14, 14 * day, 7, rlsv3.RateLimitResponse_RateLimit_WEEK},
		{5, 90 * time.Second, 200, rlsv3.RateLimitResponse_RateLimit_HOUR}, // no exact unit below
		{10, 500 * time.Millisecond, 20, rlsv3.RateLimitResponse_RateLimit_SECOND},
		{1, 11 * time.Second, 5, rlsv3.RateLimitResponse_RateLimit_MINUTE}, // no exact unit: rounded down
		{2, 2 * year, 1, rlsv3.RateLimitResponse_RateLimit_YEAR},
		{1, 2 * year, 1, rlsv3.RateLimitResponse_RateLimit_YEAR}, // at least 1
		{1 << 53, time.Millisecond, math.MaxUint32, rlsv3.RateLimitResponse_RateLimit_SECOND},
		{1 << 40, time.Minute, math.MaxUint32, rlsv3.RateLimitResponse_RateLimit_MINUTE},
	}
	for _, tt := range tests {
		got, unit := perUnit(tt.n, tt.per)
		if got != tt.want || unit != tt.unit {
			t.Errorf("perUnit(%d, %s) = %d per %s, want %d per %s", tt.n, tt.per, got, unit, tt.want, tt.unit)
		}
	}
}

func entry(k, v string) *ratelimitv3.RateLimitDescriptor_Entry {
	return &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v}
}

func descriptor(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, entry(kv[i], kv[i+1]))
	}
	return d
}

func TestConvertRefusesRequestsOutOfBounds(t *testing.T) {
	s := New(Config{}, nil, nil, prometheus.NewRegistry())
	many := func(n int, f func(i int) *ratelimitv3.RateLimitDescriptor) []*ratelimitv3.RateLimitDescriptor {
		out := make([]*ratelimitv3.RateLimitDescriptor, n)
		for i := range out {
			out[i] = f(i)
		}
		return out
	}
	one := func(kv ...string) []*ratelimitv3.RateLimitDescriptor {
		return []*ratelimitv3.RateLimitDescriptor{descriptor(kv...)}
	}
	big := strings.Repeat("v", event.MaxDescriptorValue)
	tests := []struct {
		name   string
		req    *rlsv3.RateLimitRequest
		field  string
		prefix string
	}{
		{"no domain", &rlsv3.RateLimitRequest{Descriptors: one("k", "v")}, fieldDomain, "domain: required"},
		{"long domain", &rlsv3.RateLimitRequest{Domain: strings.Repeat("d", event.MaxDomain+1), Descriptors: one("k", "v")},
			fieldDomain, "domain: longer than 255 bytes"},
		{"control in domain", &rlsv3.RateLimitRequest{Domain: "a\nb", Descriptors: one("k", "v")}, fieldDomain, "domain: not UTF-8"},
		{"invalid UTF-8 domain", &rlsv3.RateLimitRequest{Domain: "a\xffb", Descriptors: one("k", "v")}, fieldDomain, "domain: not UTF-8"},
		{"no descriptors", &rlsv3.RateLimitRequest{Domain: "d"}, fieldDescriptors, "descriptors: at least one required"},
		{"too many descriptors", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: many(event.MaxDescriptors+1,
			func(int) *ratelimitv3.RateLimitDescriptor { return descriptor("k", "v") })}, fieldDescriptors, "descriptors: 65, at most 64"},
		{"no entries", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("k", "v"), {}}},
			fieldEntries, "descriptors[1].entries: at least one required"},
		{"too many entries", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: one(strings.Split(strings.Repeat("k,v,", event.MaxEntries+1), ",")...)},
			fieldEntries, "descriptors[0].entries: 17, at most 16"},
		{"empty key", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("k", "v"), descriptor("a", "b"), descriptor("", "v")}},
			fieldKey, "descriptors[2].entries[0].key: empty"},
		{"long key", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: one("k", "v", strings.Repeat("k", event.MaxDescriptorKey+1), "v")},
			fieldKey, "descriptors[0].entries[1].key: longer than 256 bytes"},
		{"control in key", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: one("k\x00", "v")}, fieldKey, "descriptors[0].entries[0].key: not UTF-8"},
		{"long value", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: one("k", big+"v")},
			fieldValue, "descriptors[0].entries[0].value: longer than 1024 bytes"},
		{"control in value", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: one("k", "v\x7f")}, fieldValue, "descriptors[0].entries[0].value: not UTF-8"},
		{"too many bytes", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: many(17,
			func(int) *ratelimitv3.RateLimitDescriptor { return descriptor("k", big) })},
			fieldDescriptors, "descriptors: keys and values add up to 17425 bytes, at most 16384"},
		{"descriptor hits_addend", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{entry("k", "v")}, HitsAddend: wrapperspb.UInt64(MaxHitsAddend + 1)}}},
			fieldHitsAddend, "descriptors[0].hits_addend: 4294967296, at most 4294967295"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c call
			err := s.convert(tt.req, &c)
			if err == nil {
				t.Fatalf("accepted")
			}
			if err.field != tt.field || !strings.HasPrefix(err.msg, tt.prefix) {
				t.Fatalf("field %q, %q; want field %q, %q...", err.field, err.msg, tt.field, tt.prefix)
			}
		})
	}
}

func TestConvertAcceptsTheBounds(t *testing.T) {
	s := New(Config{}, nil, nil, prometheus.NewRegistry())
	// Every bound reached at once: the longest domain, the most
	// descriptors, the most entries, the longest key and value (in
	// two-byte characters), and keys and values of MaxDescriptorBytes in
	// all (the other values fill up to it).
	req := &rlsv3.RateLimitRequest{Domain: strings.Repeat("ď", event.MaxDomain/2) + "d"}
	req.Descriptors = append(req.Descriptors,
		descriptor(strings.Split(strings.Repeat("k,,", event.MaxEntries), ",")...),
		descriptor(strings.Repeat("ǩ", event.MaxDescriptorKey/2), strings.Repeat("é", event.MaxDescriptorValue/2)))
	total := event.MaxEntries + event.MaxDescriptorKey + event.MaxDescriptorValue
	for i := len(req.Descriptors); i < event.MaxDescriptors; i++ {
		fill := min(event.MaxDescriptorBytes-total-(event.MaxDescriptors-i), event.MaxDescriptorValue)
		req.Descriptors = append(req.Descriptors, descriptor("k", strings.Repeat("v", fill)))
		total += 1 + fill
	}
	if total != event.MaxDescriptorBytes {
		t.Fatalf("test request of %d bytes", total)
	}
	var c call
	if err := s.convert(req, &c); err != nil {
		t.Fatalf("refused: %v", err)
	}
	if len(c.req.Descriptors) != event.MaxDescriptors || len(c.req.Descriptors[0].Entries) != event.MaxEntries {
		t.Fatalf("converted %d descriptors, the first of %d entries", len(c.req.Descriptors), len(c.req.Descriptors[0].Entries))
	}
}

func TestConvertCostsAndSubject(t *testing.T) {
	s := New(Config{}, nil, nil, prometheus.NewRegistry())
	withHits := func(d *ratelimitv3.RateLimitDescriptor, h uint64) *ratelimitv3.RateLimitDescriptor {
		d.HitsAddend = wrapperspb.UInt64(h)
		return d
	}
	tests := []struct {
		name     string
		req      *rlsv3.RateLimitRequest
		costs    []int64
		ip       string
		endpoint string
		method   string
	}{
		{"defaults", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("k", "v")}},
			[]int64{1}, "", "/", ""},
		{"request hits_addend", &rlsv3.RateLimitRequest{Domain: "d", HitsAddend: 7,
			Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("k", "v"), withHits(descriptor("k", "w"), 3), withHits(descriptor("k", "x"), 0)}},
			[]int64{7, 3, 0}, "", "/", ""},
		{"largest hits_addend", &rlsv3.RateLimitRequest{Domain: "d", HitsAddend: math.MaxUint32,
			Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("k", "v"), withHits(descriptor("k", "w"), MaxHitsAddend)}},
			[]int64{math.MaxUint32, math.MaxUint32}, "", "/", ""},
		{"subject", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			descriptor("path", "/a/../b/%63?q=1", "method", "post"),
			descriptor("remote_address", "::ffff:10.1.2.3"),
			descriptor("remote_address", "10.9.9.9", "path", "/other", "method", "GET")}},
			[]int64{1, 1, 1}, "10.1.2.3", "/b/c", "POST"},
		{"zone", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			descriptor("remote_address", "fe80::1%eth0", "method", "GET /"), descriptor("remote_address", "10.0.0.1")}},
			[]int64{1, 1}, "", "/", ""},
		{"not an address", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			descriptor("remote_address", "10.0.0.1:443")}}, []int64{1}, "", "/", ""},
		{"IPv6", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			descriptor("remote_address", "2001:DB8::1")}}, []int64{1}, "2001:db8::1", "/", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c call
			if err := s.convert(tt.req, &c); err != nil {
				t.Fatal(err)
			}
			var costs []int64
			for _, d := range c.req.Descriptors {
				costs = append(costs, d.Cost)
			}
			if !slicesEqual(costs, tt.costs) {
				t.Errorf("costs %v, want %v", costs, tt.costs)
			}
			r := c.req
			if r.IP != tt.ip || r.Endpoint != tt.endpoint || r.Method != tt.method {
				t.Errorf("ip %q endpoint %q method %q, want %q %q %q", r.IP, r.Endpoint, r.Method, tt.ip, tt.endpoint, tt.method)
			}
			if want, _ := netip.ParseAddr(tt.ip); r.Addr != want {
				t.Errorf("addr %v, want %v", r.Addr, want)
			}
			for i, d := range tt.req.Descriptors {
				for j, e := range d.Entries {
					if got := c.req.Descriptors[i].Entries[j]; got != (rules.Entry{Key: e.Key, Value: e.Value}) {
						t.Errorf("descriptors[%d].entries[%d] = %v, want %s=%s", i, j, got, e.Key, e.Value)
					}
				}
			}
			c.release()
			if len(c.req.Descriptors) != 0 || len(c.entries) != 0 || c.entries[:cap(c.entries)][0] != (rules.Entry{}) {
				t.Error("release kept the request")
			}
		})
	}
}

func TestConvertConfiguredKeys(t *testing.T) {
	s := New(Config{AddressKey: "client", EndpointKey: "uri", MethodKey: "verb"}, nil, nil, prometheus.NewRegistry())
	var c call
	err := s.convert(&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		descriptor("remote_address", "10.0.0.1", "path", "/no", "method", "PUT"),
		descriptor("client", "10.0.0.2", "uri", "/yes", "verb", "delete")}}, &c)
	if err != nil {
		t.Fatal(err)
	}
	if r := c.req; r.IP != "10.0.0.2" || r.Endpoint != "/yes" || r.Method != "DELETE" {
		t.Fatalf("ip %q endpoint %q method %q", r.IP, r.Endpoint, r.Method)
	}
}

func TestDescriptorLabelIsBounded(t *testing.T) {
	m := newMetrics(prometheus.NewRegistry(), 3)
	r := &rules.Rule{ID: "per-user", Descriptor: &rules.DescriptorMatch{Entries: []rules.DescriptorEntry{
		{Key: "service", Value: "auth"}, {Key: "user", DetailedMetric: true}, {Key: "plan", ValueToMetric: true}}}}
	a := &rules.Applied{Rule: r}
	label := func(user, plan string) string {
		return m.descriptorLabel(a, []rules.Entry{{Key: "service", Value: "auth"}, {Key: "user", Value: user}, {Key: "plan", Value: plan}})
	}
	for _, tt := range []struct{ user, plan, want string }{
		{"alice", "free", "per-user.user_alice.plan_free"},
		{"bob", "free", "per-user.user_bob.plan_free"},
		{"alice", "free", "per-user.user_alice.plan_free"},
		{"carol", "pro", "per-user.user_carol.plan_pro"},
		{"dave", "pro", "per-user._other"},
		{"bob", "free", "per-user.user_bob.plan_free"}, // known before the bound
		{strings.Repeat("é", 40), "x", "per-user._other"},
	} {
		if got := label(tt.user, tt.plan); got != tt.want {
			t.Errorf("label(%s, %s) = %q, want %q", tt.user, tt.plan, got, tt.want)
		}
	}
	plain := &rules.Applied{Rule: &rules.Rule{ID: "plain", Descriptor: &rules.DescriptorMatch{Entries: []rules.DescriptorEntry{{Key: "k"}}}}}
	if got := m.descriptorLabel(plain, []rules.Entry{{Key: "k", Value: "anything"}}); got != "plain" {
		t.Errorf("label of a rule without detailed levels = %q, want its id", got)
	}
	if got := truncate(strings.Repeat("é", 40), 64); got != strings.Repeat("é", 32) {
		t.Errorf("truncate cut a character: %q", got)
	}
	if got := truncate("ab"+strings.Repeat("é", 40), 64); got != "ab"+strings.Repeat("é", 31) {
		t.Errorf("truncate cut a character: %q", got)
	}
}

// A rule set that no longer has a rule takes its descriptor series away,
// plain, detailed and _other, and its values: back in a later set, the
// rule gets MetricValues new ones. The series of the rules kept and those
// of no rule stay.
func TestDescriptorSeriesOfRemovedRules(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg, 2)
	setOf := func(ids ...string) *rules.Set {
		f := &rules.File{}
		for i, id := range ids {
			f.Rules = append(f.Rules, rules.Rule{ID: id, Priority: 100, Algorithm: "fixed_window", OnRedisFailure: rules.FailLocal,
				Limits:     []rules.Limit{{Requests: 1, Per: rules.Duration(time.Hour)}},
				Descriptor: &rules.DescriptorMatch{Domain: "d", Entries: []rules.DescriptorEntry{{Key: fmt.Sprint("k", i), DetailedMetric: id != "plain"}}}})
		}
		set, err := rules.Compile(f, rules.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return set
	}
	count := func(set *rules.Set, id string, values ...string) {
		r := set.Rule(id)
		for _, v := range values {
			label := m.descriptorLabel(&rules.Applied{Rule: r}, []rules.Entry{{Key: r.Descriptor.Entries[0].Key, Value: v}})
			m.descriptors.WithLabelValues("d", label, outcomeOK).Inc()
		}
	}
	first := setOf("kept", "gone", "plain")
	count(first, "kept", "a", "b", "c")
	count(first, "gone", "a", "b", "c")
	count(first, "plain", "a")
	m.descriptors.WithLabelValues("d", descriptorNone, outcomeOK).Inc()
	m.dropRemovedRules(setOf("kept"))
	got := map[string]bool{}
	families, _ := reg.Gather()
	for _, f := range families {
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "descriptor" {
					got[l.GetValue()] = true
				}
			}
		}
	}
	want := map[string]bool{"kept.k0_a": true, "kept.k0_b": true, "kept._other": true, "_none": true}
	if !maps.Equal(got, want) {
		t.Errorf("descriptor series %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
	}
	again := setOf("kept", "gone")
	if label := m.descriptorLabel(&rules.Applied{Rule: again.Rule("gone")}, []rules.Entry{{Key: "k1", Value: "z"}}); label != "gone.k1_z" {
		t.Errorf("a rule back after its removal: label %q, want a value of its own", label)
	}
}

func slicesEqual(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
