package rlsxds

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/ratewarden/ratewarden/internal/rlsconfig"
)

// chain is a descriptor nested depth levels deep, each level of key, the
// innermost with the leaves below it.
func chain(depth int, key, value string, leaves []*rlsconfv3.RateLimitDescriptor) *rlsconfv3.RateLimitDescriptor {
	d := &rlsconfv3.RateLimitDescriptor{Key: key, Value: value, Descriptors: leaves}
	for range depth - 1 {
		d = &rlsconfv3.RateLimitDescriptor{Key: key, Value: value, Descriptors: []*rlsconfv3.RateLimitDescriptor{d}}
	}
	return d
}

func leaves(n int, policy *rlsconfv3.RateLimitPolicy) []*rlsconfv3.RateLimitDescriptor {
	out := make([]*rlsconfv3.RateLimitDescriptor, n)
	for i := range out {
		out[i] = &rlsconfv3.RateLimitDescriptor{Key: fmt.Sprintf("k%d", i), RateLimit: policy}
	}
	return out
}

func config(name string, ds ...*rlsconfv3.RateLimitDescriptor) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: name, Domain: name, Descriptors: ds}
}

// repeatedRateLimit is a RateLimitConfig of name whose one descriptor
// writes its rate_limit again and again, each time with 16 replaces of no
// name, up to size bytes: decoding merges the occurrences into one
// rate_limit and appends their replaces (2 bytes each on the wire).
func repeatedRateLimit(name string, size int) *rlsconfv3.RateLimitConfig {
	var policy []byte
	for range 16 {
		policy = protowire.AppendTag(policy, fieldPolicyReplaces, protowire.BytesType)
		policy = protowire.AppendBytes(policy, nil)
	}
	desc := protowire.AppendString(protowire.AppendTag(nil, fieldDescriptorKey, protowire.BytesType), "k")
	for len(desc)+len(policy) < size-16 {
		desc = protowire.AppendTag(desc, fieldDescriptorRateLimit, protowire.BytesType)
		desc = protowire.AppendBytes(desc, policy)
	}
	c := config(name)
	c.ProtoReflect().SetUnknown(protowire.AppendBytes(protowire.AppendTag(nil, fieldConfigDescriptors, protowire.BytesType), desc))
	return c
}

// allocated is the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// Responses past the bounds of a configuration are refused, naming the
// bound, before their resources are decoded; what a response within them
// builds does not grow with its depth or its paths' length. Each costs at
// most a few times its size on the wire.
func TestLoadBoundsHostileResponses(t *testing.T) {
	perSecond := &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 1}
	long := strings.Repeat("k", 256)
	longValue := strings.Repeat("v", 1024)
	many := func(n int, c func(i int) *rlsconfv3.RateLimitConfig) []*rlsconfv3.RateLimitConfig {
		out := make([]*rlsconfv3.RateLimitConfig, n)
		for i := range out {
			out[i] = c(i)
		}
		return out
	}
	for name, tt := range map[string]struct {
		configs []*rlsconfv3.RateLimitConfig
		want    string // "": loads
	}{
		"nested 4 999 deep, 40 times": {many(40, func(i int) *rlsconfv3.RateLimitConfig {
			return config(fmt.Sprintf("deep%d", i), chain(4999, "k", "", nil))
		}), "xds:deep0: descriptors[0]" + strings.Repeat(".descriptors[0]", 7) + ".descriptors: nested deeper than 8 levels"},
		"too many descriptors": {[]*rlsconfv3.RateLimitConfig{config("flat", leaves(rlsconfig.MaxDescriptors+1, nil)...)},
			fmt.Sprintf("more than %d descriptors in the response", rlsconfig.MaxDescriptors)},
		"too many replaces": {[]*rlsconfv3.RateLimitConfig{config("r", &rlsconfv3.RateLimitDescriptor{Key: "k",
			RateLimit: &rlsconfv3.RateLimitPolicy{Replaces: make([]*rlsconfv3.RateLimitReplace, 100000)}})},
			"xds:r: descriptors[0].rate_limit.replaces: at most 16 names"},
		"replaces spread over a rate_limit written 120 000 times": {[]*rlsconfv3.RateLimitConfig{repeatedRateLimit("rr", 4<<20)},
			"xds:rr: descriptors[0].rate_limit.replaces: at most 16 names"},
		"a long key": {[]*rlsconfv3.RateLimitConfig{config("l", &rlsconfv3.RateLimitDescriptor{Key: strings.Repeat("k", 1<<20)})},
			"xds:l: descriptors[0].key: at most 256 bytes"},
		"too many resources": {many(rlsconfig.MaxFiles+1, func(i int) *rlsconfv3.RateLimitConfig { return config(fmt.Sprint(i)) }),
			"more than 1000 resources"},
		"the longest paths, each leaf refused": {[]*rlsconfv3.RateLimitConfig{config("p", chain(7, long, longValue,
			leaves(rlsconfig.MaxDescriptors-7, &rlsconfv3.RateLimitPolicy{RequestsPerUnit: 1})))},
			fmt.Sprintf("and %d more problems", rlsconfig.MaxDescriptors-7-100)}, // one per leaf: no unit
		"the longest paths, valid": {[]*rlsconfv3.RateLimitConfig{config("p", chain(7, long, longValue,
			leaves(rlsconfig.MaxDescriptors-7, perSecond)))}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			res := make([]*anypb.Any, len(tt.configs))
			wire := 0
			for i, c := range tt.configs {
				res[i] = anyOf(t, c)
				wire += len(res[i].Value)
			}
			runtime.GC()
			var err error
			bytes := allocated(func() { _, err = Load(res) })
			t.Logf("%d KB on the wire, %d KB allocated", wire>>10, bytes>>10)
			switch {
			case tt.want == "" && err != nil:
				t.Fatal(err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %.300v, want %q", err, tt.want)
			}
			if len(fmt.Sprint(err)) > 100<<10 {
				t.Errorf("the error is %d KB long", len(fmt.Sprint(err))>>10)
			}
			if bytes > 256<<20 {
				t.Errorf("%d MB allocated", bytes>>20)
			}
		})
	}
}

// A response of more resources than a configuration may hold is decoded
// without them, standing for a refusal, and costs no more than its size.
func TestResponseCodecBoundsResources(t *testing.T) {
	c := newResponseCodec()
	resp := &discoverygrpc.DiscoveryResponse{VersionInfo: "v9", Nonce: "n9", TypeUrl: TypeURL}
	for range 2 << 20 {
		resp.Resources = append(resp.Resources, &anypb.Any{})
	}
	wire, err := c.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	got := &discoverygrpc.DiscoveryResponse{}
	bytes := allocated(func() { err = c.Unmarshal(wire, got) })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d KB on the wire, %d KB allocated", wire.Len()>>10, bytes>>10)
	if got.VersionInfo != "v9" || got.Nonce != "n9" || !tooMany(got.Resources) {
		t.Errorf("decoded %v %v, %d resources", got.VersionInfo, got.Nonce, len(got.Resources))
	}
	if bytes > 4*uint64(wire.Len()) {
		t.Errorf("%d MB allocated", bytes>>20)
	}
	if _, err := Load(got.Resources); err == nil || !strings.Contains(err.Error(), "more than 1000 resources") {
		t.Errorf("Load: %v", err)
	}
	small := &discoverygrpc.DiscoveryResponse{VersionInfo: "v1", Resources: []*anypb.Any{{TypeUrl: TypeURL}}}
	wire, _ = c.Marshal(small)
	got = &discoverygrpc.DiscoveryResponse{}
	if err := c.Unmarshal(wire, got); err != nil || len(got.Resources) != 1 || got.Resources[0].TypeUrl != TypeURL {
		t.Errorf("a small response: %v, %v", got, err)
	}
}
