package e2e

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
)

// xdsServer is a management server of go-control-plane (the library Envoy
// Gateway's is built on) serving RateLimitConfig resources from a snapshot
// cache, on a loopback port that stays the same across restarts. It
// records the refusals (NACKs) its clients send.
type xdsServer struct {
	t     *testing.T
	addr  string
	cache cachev3.SnapshotCache

	mu    sync.Mutex
	grpc  *grpc.Server
	nacks []string // each NACK's error_detail message
}

func startXDSServer(t *testing.T) *xdsServer {
	t.Helper()
	s := &xdsServer{t: t, cache: cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	s.serve(ln)
	t.Cleanup(s.stop)
	return s
}

func (s *xdsServer) serve(ln net.Listener) {
	callbacks := serverv3.CallbackFuncs{StreamRequestFunc: func(_ int64, req *discoverygrpc.DiscoveryRequest) error {
		if d := req.GetErrorDetail(); d != nil {
			s.mu.Lock()
			s.nacks = append(s.nacks, d.GetMessage())
			s.mu.Unlock()
		}
		return nil
	}}
	g := grpc.NewServer()
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(g, serverv3.NewServer(context.Background(), s.cache, callbacks))
	s.mu.Lock()
	s.grpc = g
	s.mu.Unlock()
	go func() { _ = g.Serve(ln) }()
}

func (s *xdsServer) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.grpc != nil {
		s.grpc.Stop()
		s.grpc = nil
	}
}

// restart serves again on the same address.
func (s *xdsServer) restart() {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		s.t.Fatal(err)
	}
	s.serve(ln)
}

// set publishes version to node: one RateLimitConfig per config.
func (s *xdsServer) set(node, version string, configs ...*rlsconfv3.RateLimitConfig) {
	s.t.Helper()
	res := make([]types.Resource, len(configs))
	for i, c := range configs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		s.t.Fatal(err)
	}
}

func (s *xdsServer) nacked() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.nacks...)
}

// perHour is a RateLimitConfig of domain: api_key values limited to n an
// hour each.
func perHour(domain string, n uint32, unit rlsconfv3.RateLimitUnit) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: domain, Domain: domain, Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key: "api_key", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: unit, RequestsPerUnit: n},
	}}}
}

// The limiter as Envoy Gateway runs its rate limit service: its RLS
// config from an xDS management server (CONFIG_TYPE=GRPC_XDS_SOTW). It
// waits for the first config before it listens, as envoyproxy/ratelimit
// does; an update applies while it serves; a config that does not load is
// refused back (NACK) with the rules in force kept; with the server gone
// it keeps serving the last config, and follows the server once it is
// back.
func TestRLSConfigOverXDS(t *testing.T) {
	const node = "ratewarden-test"
	xds := startXDSServer(t)
	xds.stop() // down at the limiter's start
	e := newEnv(t)
	vars := map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": xds.addr,
		"CONFIG_GRPC_XDS_NODE_ID": node, "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "100ms", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "200ms"}
	for k, v := range e.vars {
		vars[k] = v
	}
	lim := launch(t, "limiter", vars)
	time.Sleep(time.Second)
	if out := lim.out.String(); strings.Contains(out, `"limiter listening"`) || !strings.Contains(out, "xDS subscription ended") {
		t.Fatalf("with the xDS server down the limiter listens or does not retry:\n%s", out)
	}
	xds.set(node, "v1", perHour("gw", 2, rlsconfv3.RateLimitUnit_HOUR))
	xds.restart()
	if err := lim.await("/readyz", 15*time.Second); err != nil {
		t.Fatal(err)
	}
	client := rlsClient(t, lim)
	limitOf := func(key string) (string, uint32) {
		t.Helper()
		resp, err := client.ShouldRateLimit(context.Background(), rlsRequest("gw", "api_key="+key))
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode.String(), resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	var codes []string
	for range 3 {
		code, _ := limitOf("k1")
		codes = append(codes, code)
	}
	if got := strings.Join(codes, " "); got != "OK OK OVER_LIMIT" {
		t.Fatalf("the first config: %s, want OK OK OVER_LIMIT", got)
	}

	// An update while serving.
	updated := time.Now()
	xds.set(node, "v2", perHour("gw", 4, rlsconfv3.RateLimitUnit_HOUR))
	waitFor(t, 10*time.Second, "the update to 4 an hour", func() bool { _, n := limitOf("k2"); return n == 4 })
	t.Logf("update applied %v after it was published", time.Since(updated).Round(time.Millisecond))

	// A config that does not load (no unit) is refused back; 4 stays.
	xds.set(node, "v3", perHour("gw", 9, rlsconfv3.RateLimitUnit_UNKNOWN))
	waitFor(t, 10*time.Second, "a NACK of v3", func() bool { return len(xds.nacked()) > 0 })
	if msg := xds.nacked()[0]; !strings.Contains(msg, "xds:gw") || !strings.Contains(msg, "missing unit") {
		t.Errorf("NACK %q: want the resource and the reason", msg)
	}
	if _, n := limitOf("k3"); n != 4 {
		t.Errorf("after a refused config the limit is %d, want 4", n)
	}
	if got := lim.metric(t, "rate_limit_xds_responses_total", "result", "refused"); got < 1 {
		t.Errorf("rate_limit_xds_responses_total{result=refused} = %v", got)
	}

	// The server goes away: the last config serves; it comes back with v4.
	xds.stop()
	time.Sleep(300 * time.Millisecond)
	if _, n := limitOf("k4"); n != 4 {
		t.Errorf("with the server gone the limit is %d, want 4", n)
	}
	xds.set(node, "v4", perHour("gw", 6, rlsconfv3.RateLimitUnit_MINUTE))
	xds.restart()
	waitFor(t, 10*time.Second, "v4 after the server came back", func() bool { _, n := limitOf("k5"); return n == 6 })
}
