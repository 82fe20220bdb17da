package rlsxds

import (
	"testing"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/ratewarden/ratewarden/internal/rlsconfig"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// shape is the deepest level and the count of the descriptors of c.
func shape(c *rlsconfv3.RateLimitConfig) (depth, count int) {
	type level struct {
		ds    []*rlsconfv3.RateLimitDescriptor
		depth int
	}
	stack := []level{{c.GetDescriptors(), 1}}
	for len(stack) > 0 {
		l := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, d := range l.ds {
			count++
			depth = max(depth, l.depth)
			stack = append(stack, level{d.GetDescriptors(), l.depth + 1})
		}
	}
	return depth, count
}

// Arbitrary bytes as a resource never panic; a resource the decoder reads
// as nested deeper than a config may be, or holding more descriptors, is
// always refused (the bounds are checked on the encoding, before it is
// decoded); one that loads gives rules that compile.
func FuzzLoad(f *testing.F) {
	for _, c := range []*rlsconfv3.RateLimitConfig{
		config("gw", &rlsconfv3.RateLimitDescriptor{Key: "k", Value: "v*", RateLimit: &rlsconfv3.RateLimitPolicy{
			Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 2, Name: "a", Replaces: []*rlsconfv3.RateLimitReplace{{Name: "b"}}}}),
		config("deep", chain(rules.MaxEntries+1, "k", "", nil)),
		config("leaves", chain(rules.MaxEntries, "k", "", leaves(3, &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND}))),
	} {
		b, err := proto.Marshal(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Load([]*anypb.Any{{TypeUrl: TypeURL, Value: data}})
		var decoded rlsconfv3.RateLimitConfig
		if proto.Unmarshal(data, &decoded) == nil {
			if depth, count := shape(&decoded); (depth > rules.MaxEntries || count > rlsconfig.MaxDescriptors) && err == nil {
				t.Fatalf("loaded a config %d levels deep, of %d descriptors", depth, count)
			}
		}
		if err != nil {
			return
		}
		if _, err := rules.Compile(&rules.File{Rules: c.Rules}, rules.Options{}); err != nil {
			t.Fatalf("rules do not compile: %v", err)
		}
	})
}

// Arbitrary bytes as a response decode as the proto codec decodes them,
// unless they hold more resources than a config may: then without them.
func FuzzResponseCodec(f *testing.F) {
	resp := &discoverygrpc.DiscoveryResponse{VersionInfo: "v1", Nonce: "n", TypeUrl: TypeURL,
		Resources: []*anypb.Any{{TypeUrl: TypeURL, Value: []byte{0x0a, 0x01, 'x'}}}}
	b, err := proto.Marshal(resp)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	codec := newResponseCodec()
	f.Fuzz(func(t *testing.T, data []byte) {
		got, want := &discoverygrpc.DiscoveryResponse{}, &discoverygrpc.DiscoveryResponse{}
		err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, got)
		wantErr := proto.Unmarshal(data, want)
		if tooMany(got.Resources) {
			return
		}
		if (err == nil) != (wantErr == nil) || err == nil && !proto.Equal(got, want) {
			t.Fatalf("decoded %v (%v), want %v (%v)", got, err, want, wantErr)
		}
	})
}
