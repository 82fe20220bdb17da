package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
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

	"github.com/ratewarden/ratewarden/internal/testkit"
)

// xdsServer is a management server of go-control-plane (the library Envoy
// Gateway's is built on) serving RateLimitConfig resources from a snapshot
// cache, on a loopback port that stays the same across restarts. It
// records the answers its clients send: the versions acknowledged (ACK)
// and the refusals (NACK).
type xdsServer struct {
	t     *testing.T
	addr  string
	cache cachev3.SnapshotCache

	mu    sync.Mutex
	grpc  *grpc.Server
	acks  []string // each ACK's version_info
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
		s.mu.Lock()
		defer s.mu.Unlock()
		switch d := req.GetErrorDetail(); {
		case d != nil:
			s.nacks = append(s.nacks, d.GetMessage())
		case req.GetResponseNonce() != "":
			s.acks = append(s.acks, req.GetVersionInfo())
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

// acked returns the versions acknowledged, in order.
func (s *xdsServer) acked() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.acks...)
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
	testkit.AvoidHourEnd(t) // after the start, which may take long: the three calls count in one hour's window
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
	testkit.WaitFor(t, 10*time.Second, "the update to 4 an hour", func() bool { _, n := limitOf("k2"); return n == 4 })
	t.Logf("update applied %v after it was published", time.Since(updated).Round(time.Millisecond))

	// A config that does not load (no unit) is refused back; 4 stays.
	xds.set(node, "v3", perHour("gw", 9, rlsconfv3.RateLimitUnit_UNKNOWN))
	testkit.WaitFor(t, 10*time.Second, "a NACK of v3", func() bool { return len(xds.nacked()) > 0 })
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
	testkit.WaitFor(t, 10*time.Second, "v4 after the server came back", func() bool { _, n := limitOf("k5"); return n == 6 })
}

// xdsRSSBound is the peak resident memory docs/envoy.md states for a
// limiter sent any response, however hostile.
const xdsRSSBound = 200 << 20

// nested is a RateLimitConfig of domain whose one descriptor chain nests
// depth levels deep: 7 bytes a level on the wire.
func nested(domain string, depth int) *rlsconfv3.RateLimitConfig {
	d := &rlsconfv3.RateLimitDescriptor{Key: "k"}
	for range depth - 1 {
		d = &rlsconfv3.RateLimitDescriptor{Key: "k", Descriptors: []*rlsconfv3.RateLimitDescriptor{d}}
	}
	return &rlsconfv3.RateLimitConfig{Name: domain, Domain: domain, Descriptors: []*rlsconfv3.RateLimitDescriptor{d}}
}

// A management server that sends what no config may be (40 resources
// whose descriptors nest 4 999 levels deep, 1.3 MB on the wire) cannot
// exhaust the limiter's memory: the response is refused back (NACK) with
// the reason, the last config keeps deciding, and the peak resident memory
// stays under xdsRSSBound. A watchdog kills the limiter past 1 GiB so that
// a regression fails without taking the machine down.
func TestXDSHostileResponse(t *testing.T) {
	const node, resources, depth = "ratewarden-test", 40, 4999
	xds := startXDSServer(t)
	xds.set(node, "v1", perHour("gw", 2, rlsconfv3.RateLimitUnit_HOUR))
	e := newEnv(t)
	vars := map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": xds.addr,
		"CONFIG_GRPC_XDS_NODE_ID": node, "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "100ms", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "200ms"}
	for k, v := range e.vars {
		vars[k] = v
	}
	lim := start(t, "limiter", vars)
	pid := lim.cmd.Process.Pid
	client := rlsClient(t, lim)
	limitOf := func(key string) uint32 {
		t.Helper()
		resp, err := client.ShouldRateLimit(context.Background(), rlsRequest("gw", "api_key="+key))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	if n := limitOf("k1"); n != 2 {
		t.Fatalf("the first config: limit %d, want 2", n)
	}
	before, err := procStatusBytes(pid, "VmRSS")
	if err != nil {
		t.Fatal(err)
	}

	killed := make(chan int64, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if hwm, err := procStatusBytes(pid, "VmHWM"); err == nil && hwm > 1<<30 {
				_ = lim.cmd.Process.Kill()
				killed <- hwm
				return
			}
		}
	}()
	hostile := make([]*rlsconfv3.RateLimitConfig, resources)
	for i := range hostile {
		hostile[i] = nested(fmt.Sprintf("deep%d", i), depth)
	}
	sent := time.Now()
	xds.set(node, "v2", hostile...)
	for len(xds.nacked()) == 0 {
		select {
		case hwm := <-killed:
			t.Fatalf("the limiter reached %d MB of resident memory %v after the response (killed; %d MB before)",
				hwm>>20, time.Since(sent).Round(time.Millisecond), before>>20)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Since(sent) > 60*time.Second {
			hwm, _ := procStatusBytes(pid, "VmHWM")
			t.Fatalf("no NACK within 60s (peak resident memory %d MB)", hwm>>20)
		}
	}
	hwm, err := procStatusBytes(pid, "VmHWM")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("NACK %v after the response; resident %d MB before, peak %d MB", time.Since(sent).Round(time.Millisecond), before>>20, hwm>>20)
	if msg := xds.nacked()[0]; !strings.Contains(msg, "xds:deep") || !strings.Contains(msg, "nested deeper than 8 levels") {
		t.Errorf("NACK %q: want the resource and the reason", msg)
	}
	if hwm > xdsRSSBound {
		t.Errorf("peak resident memory %d MB, over the %d MB docs/envoy.md states", hwm>>20, xdsRSSBound>>20)
	}
	if n := limitOf("k2"); n != 2 {
		t.Errorf("after the hostile response the limit is %d, want 2 (the last config)", n)
	}
	// The server sends a refused response back at once: it is refused
	// again without being loaded, and logged once.
	testkit.WaitFor(t, 10*time.Second, "the response sent back", func() bool { return len(xds.nacked()) > 1 })
	if n := strings.Count(lim.out.String(), "xDS RLS config refused"); n != 1 {
		t.Errorf("the refusal of %d NACKs logged %d times, want once", len(xds.nacked()), n)
	}
}

// A management server re-publishing the config in force under a new
// version every 20 ms: each is acknowledged and none is applied again, so
// the limiter keeps its rule set, and the leases of a rule of its rules
// file are not given back.
func TestXDSRepublishedConfigIsNotReapplied(t *testing.T) {
	const node, versions = "ratewarden-test", 50
	// A lease ends with its day's window: one that turned would give back
	// units the test requires kept.
	testkit.AvoidWindowEnd(t, 24*time.Hour, time.Minute)
	xds := startXDSServer(t)
	xds.set(node, "v0", perHour("gw", 2, rlsconfv3.RateLimitUnit_HOUR))
	e := newEnvWith(t, `rules:
  - {id: hot, match: {endpoints: ["/hot"]}, key: [endpoint], algorithm: fixed_window, limits: [{requests: 100000, per: 24h}], lease: {max_units: 50}}
`)
	vars := map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": xds.addr, "CONFIG_GRPC_XDS_NODE_ID": node}
	for k, v := range e.vars {
		vars[k] = v
	}
	lim := start(t, "limiter", vars)
	for range 20 {
		if d := check(t, lim, "192.0.2.1", "/hot"); !d.Allowed {
			t.Fatalf("/hot: %+v", d)
		}
	}
	returned := lim.metric(t, "rate_limit_lease_units_returned_total")
	for i := 1; i <= versions; i++ {
		xds.set(node, fmt.Sprintf("v%d", i), perHour("gw", 2, rlsconfv3.RateLimitUnit_HOUR))
		check(t, lim, "192.0.2.1", "/hot")
		time.Sleep(20 * time.Millisecond)
	}
	last := fmt.Sprintf("v%d", versions)
	testkit.WaitFor(t, 10*time.Second, "the last version acknowledged", func() bool { return slices.Contains(xds.acked(), last) })
	applied, unchanged := lim.metric(t, "rate_limit_xds_responses_total", "result", "applied"),
		lim.metric(t, "rate_limit_xds_responses_total", "result", "unchanged")
	t.Logf("%d versions published: %v applied, %v unchanged, %d ACKs; %v leased units given back",
		versions, applied, unchanged, len(xds.acked()), lim.metric(t, "rate_limit_lease_units_returned_total")-returned)
	if applied != 1 || unchanged < 1 || len(xds.nacked()) != 0 {
		t.Errorf("%v responses applied, %v unchanged, NACKs %q; want 1 applied (the first)", applied, unchanged, xds.nacked())
	}
	if n := lim.metric(t, `rate_limit_rules_reloads_total{result="success",source="rls_config"}`); n != 1 {
		t.Errorf("the RLS config put in force %v times, want 1", n)
	}
	if n := lim.metric(t, "rate_limit_lease_units_returned_total"); n != returned {
		t.Errorf("%v leased units given back during the re-publications, want none", n-returned)
	}
}

// A management server that renames its rules at each version (here a
// wildcard written with one more '*' each time: the same requests match,
// under a new rule id) cannot grow the descriptor metric: the series of
// the rules no longer in force go, those of detailed_metric values with
// them, however many values each had.
func TestXDSRenamedRulesLeaveNoSeries(t *testing.T) {
	const node, versions, users = "ratewarden-test", 20, 100
	xds := startXDSServer(t)
	e := newEnv(t)
	vars := map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": xds.addr, "CONFIG_GRPC_XDS_NODE_ID": node,
		"FORCE_START_WITHOUT_INITIAL_CONFIG": "true"}
	for k, v := range e.vars {
		vars[k] = v
	}
	lim := start(t, "limiter", vars)
	client := rlsClient(t, lim)
	for v := 1; v <= versions; v++ {
		xds.set(node, fmt.Sprintf("v%d", v), &rlsconfv3.RateLimitConfig{Name: "gw", Domain: "gw", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key: "user", Value: "u" + strings.Repeat("*", v), DetailedMetric: true,
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 1000}}}})
		testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("v%d acknowledged", v), func() bool { return slices.Contains(xds.acked(), fmt.Sprintf("v%d", v)) })
		for u := range users {
			if _, err := client.ShouldRateLimit(context.Background(), rlsRequest("gw", fmt.Sprintf("user=u%d", u))); err != nil {
				t.Fatal(err)
			}
		}
	}
	series := lim.series(t, "rate_limit_rls_descriptors_total")
	t.Logf("%d versions of %d values each: %d series of rate_limit_rls_descriptors_total", versions, users, len(series))
	if len(series) > users {
		t.Errorf("%d series, want at most %d (the values of the rule in force)", len(series), users)
	}
	for _, s := range series {
		if !strings.Contains(s, `descriptor="rls.gw.user_u`+strings.Repeat("_", versions)+`.`) {
			t.Errorf("series %s of a rule no longer in force", s)
			break
		}
	}
}

// series returns the lines of metric family name that /metrics shows.
func (p *proc) series(t *testing.T, name string) []string {
	t.Helper()
	addr := p.addr
	if p.opsAddr != "" {
		addr = p.opsAddr
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, name+"{") {
			out = append(out, line)
		}
	}
	return out
}
