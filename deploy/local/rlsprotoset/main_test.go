package main

import (
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The protoset stands on its own, as protoc's --include_imports writes it:
// every file after its imports, and ShouldRateLimit resolvable from it.
func TestProtosetResolves(t *testing.T) {
	set := protoset(rlsv3.File_envoy_service_ratelimit_v3_rls_proto)
	files, err := protodesc.NewFiles(set)
	if err != nil {
		t.Fatalf("the protoset does not resolve: %v", err)
	}
	d, err := files.FindDescriptorByName("envoy.service.ratelimit.v3.RateLimitService.ShouldRateLimit")
	if err != nil {
		t.Fatal(err)
	}
	if in := d.(protoreflect.MethodDescriptor).Input().FullName(); in != "envoy.service.ratelimit.v3.RateLimitRequest" {
		t.Fatalf("ShouldRateLimit takes %s", in)
	}
	seen := map[string]bool{}
	for _, f := range set.File {
		for _, dep := range f.Dependency {
			if !seen[dep] {
				t.Fatalf("%s before its import %s", f.GetName(), dep)
			}
		}
		seen[f.GetName()] = true
	}
}
