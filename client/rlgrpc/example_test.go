package rlgrpc_test

import (
	"context"
	"log"
	"net"
	"net/netip"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/ratewarden/ratewarden/client"
	"github.com/ratewarden/ratewarden/client/rlgrpc"
)

// A gRPC server whose calls the limiter decides, counted per client IP
// behind an Envoy at 10.0.0.0/8 and per user, with the user id a
// front proxy verified and put in the call's metadata.
func ExampleUnaryServerInterceptor() {
	c, err := client.New(client.Config{URL: "http://limiter:8080", Token: os.Getenv("RATEWARDEN_TOKEN")})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background()) // sends the reports still queued

	cfg := rlgrpc.Config{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		User: func(ctx context.Context, _ string) string {
			if v := metadata.ValueFromIncomingContext(ctx, "x-user-id"); len(v) > 0 {
				return v[0]
			}
			return ""
		},
	}
	s := grpc.NewServer(
		grpc.ChainUnaryInterceptor(rlgrpc.UnaryServerInterceptor(c, cfg)),
		grpc.ChainStreamInterceptor(rlgrpc.StreamServerInterceptor(c, cfg)),
	)
	healthpb.RegisterHealthServer(s, health.NewServer())

	lis, err := net.Listen("tcp", ":9090")
	if err != nil {
		log.Fatal(err)
	}
	_ = s.Serve(lis)
}
