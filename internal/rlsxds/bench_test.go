package rlsxds

import (
	"fmt"
	"testing"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// Loading a response of n wildcard siblings (/api/v<i>/*): what a limiter
// does with each response before the merger compiles it once more.
func BenchmarkLoadWildcardSiblings(b *testing.B) {
	for _, n := range []int{16000, 20000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			c := &rlsconfv3.RateLimitConfig{Name: "edge", Domain: "edge"}
			for i := range n {
				c.Descriptors = append(c.Descriptors, &rlsconfv3.RateLimitDescriptor{Key: "path", Value: fmt.Sprintf("/api/v%d/*", i),
					RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 10}})
			}
			res, err := anypb.New(c)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := Load([]*anypb.Any{res}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
