// Command rlsprotoset writes the protoset (a FileDescriptorSet, protoc's
// --descriptor_set_out --include_imports) of Envoy's rate limit service,
// envoy/service/ratelimit/v3/rls.proto and every file it imports, from the
// descriptors compiled into go-control-plane: what a client without the
// .proto files, such as ghz, needs to call ShouldRateLimit on a server
// without reflection. deploy/local/ab.sh writes it at each run (PROTOCOL=ghz)
// rather than keep a binary file in the repository.
//
//	rlsprotoset -out rls.protoset
package main

import (
	"flag"
	"fmt"
	"os"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

func main() {
	out := flag.String("out", "", "the `file` to write (required)")
	flag.Parse()
	if *out == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: rlsprotoset -out FILE")
		os.Exit(2)
	}
	b, err := proto.Marshal(protoset(rlsv3.File_envoy_service_ratelimit_v3_rls_proto))
	if err == nil {
		err = os.WriteFile(*out, b, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rlsprotoset:", err)
		os.Exit(1)
	}
}

// protoset returns f and its transitive imports, each after its imports,
// as protoc orders them.
func protoset(f protoreflect.FileDescriptor) *descriptorpb.FileDescriptorSet {
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	var add func(protoreflect.FileDescriptor)
	add = func(f protoreflect.FileDescriptor) {
		if seen[f.Path()] {
			return
		}
		seen[f.Path()] = true
		imports := f.Imports()
		for i := range imports.Len() {
			add(imports.Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(f))
	}
	add(f)
	return set
}
