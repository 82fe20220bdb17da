package rlsxds

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratewarden/ratewarden/internal/rlsconfig"
)

func anyOf(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// A resource is loaded as the file of the same content: units, names,
// replaces, unlimited, nested descriptors, shadow mode; two resources of
// one name are told apart.
func TestLoad(t *testing.T) {
	cfg := &rlsconfv3.RateLimitConfig{Name: "edge", Domain: "edge", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "remote_address", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 10, Name: "per_ip"}},
		{Key: "path", Value: "/api/*/action", Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "user", ShadowMode: true, RateLimit: &rlsconfv3.RateLimitPolicy{Unit: 7, // WEEK, newer than this proto RequestsPerUnit: 0,
				Replaces: []*rlsconfv3.RateLimitReplace{{Name: "per_ip"}}}},
		}},
		{Key: "internal", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true}},
	}}
	other := &rlsconfv3.RateLimitConfig{Name: "edge", Domain: "other"}
	c, err := Load([]*anypb.Any{anyOf(t, cfg), anyOf(t, other)})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Files) != 2 || c.Files[0] != "xds:edge" || c.Files[1] != "xds:[1]edge" {
		t.Errorf("files %q", c.Files)
	}
	if len(c.Rules) != 3 {
		t.Fatalf("%d rules, want 3: %+v", len(c.Rules), c.Rules)
	}
	ip, user, internal := c.Rules[0], c.Rules[1], c.Rules[2]
	if ip.Limits[0].Requests != 10 || time.Duration(ip.Limits[0].Per) != time.Minute || ip.Descriptor.Name != "per_ip" {
		t.Errorf("per_ip: %+v %+v", ip.Limits, ip.Descriptor)
	}
	if !user.Shadow || user.Limits[0].Requests != 0 || time.Duration(user.Limits[0].Per) != 7*24*time.Hour || user.Descriptor.Replaces[0] != "per_ip" {
		t.Errorf("user: shadow %v, %+v, %+v", user.Shadow, user.Limits, user.Descriptor)
	}
	if !internal.Descriptor.Unlimited {
		t.Errorf("internal: %+v", internal.Descriptor)
	}
}

// What envoyproxy/ratelimit refuses is refused: a policy without a unit,
// a duplicate domain, a resource of another type.
func TestLoadRefuses(t *testing.T) {
	noUnit := &rlsconfv3.RateLimitConfig{Name: "a", Domain: "a", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{RequestsPerUnit: 5}}}}
	dup := &rlsconfv3.RateLimitConfig{Name: "b", Domain: "a"}
	for name, tt := range map[string]struct {
		res  []*anypb.Any
		want string
	}{
		"no unit":          {[]*anypb.Any{anyOf(t, noUnit)}, "xds:a: domain a: descriptor k: rate_limit: missing unit"},
		"duplicate domain": {[]*anypb.Any{anyOf(t, &rlsconfv3.RateLimitConfig{Name: "x", Domain: "a"}), anyOf(t, dup)}, "duplicate domain"},
		"another type":     {[]*anypb.Any{anyOf(t, wrapperspb.String("x"))}, "resource 0: type"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Load(tt.res); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}

// The waits as envoyproxy/ratelimit's backoff gives them: its default
// factor 0.5 keeps every wait at the initial interval; a factor of 2
// doubles up to the maximum; jitter draws between the initial interval and
// the grown wait.
func TestBackoff(t *testing.T) {
	erl := Backoff{Initial: 10 * time.Second, Max: time.Minute, Factor: 0.5, Jitter: true}
	for attempt := range 5 {
		if w := erl.wait(attempt, func() float64 { return 0.99 }); w != 10*time.Second {
			t.Errorf("default factor, attempt %d: %v, want 10s", attempt, w)
		}
	}
	doubling := Backoff{Initial: time.Second, Max: 5 * time.Second, Factor: 2}
	var got []time.Duration
	for attempt := range 5 {
		got = append(got, doubling.wait(attempt, nil))
	}
	if want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}; !slices.Equal(got, want) {
		t.Errorf("doubling: %v, want %v", got, want)
	}
	doubling.Jitter = true
	if w := doubling.wait(2, func() float64 { return 0.5 }); w != 2500*time.Millisecond {
		t.Errorf("jitter half way between 1s and 4s: %v", w)
	}
}

// answers is an ADS client that records the answers sent.
type answers struct {
	sotw.ADSClient
	acks  int
	nacks []string
}

func (a *answers) Ack() error            { a.acks++; return nil }
func (a *answers) Nack(msg string) error { a.nacks = append(a.nacks, msg); return nil }

// A response equal to the last one applied (a config re-published under a
// new version, its resources in any order) is acknowledged without being
// loaded or applied again, and
// one equal to the last one refused (go-control-plane's server sends it
// back at once after the NACK) is refused again without being loaded,
// logged once.
func TestHandleAnswersARepeatedResponseWithoutLoadingIt(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	applies := 0
	s := New(Config{Log: zap.New(core), Apply: func(*rlsconfig.Config) (bool, error) { applies++; return true, nil }})
	s.pace = 0 // refused again at once: TestRepeatedRefusalIsPaced
	good := []*anypb.Any{anyOf(t, &rlsconfv3.RateLimitConfig{Name: "gw", Domain: "gw", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "api_key", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 2}}}}),
		anyOf(t, &rlsconfv3.RateLimitConfig{Name: "other", Domain: "other"})}
	bad := []*anypb.Any{anyOf(t, &rlsconfv3.RateLimitConfig{Name: "gw", Domain: "gw", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "api_key", RateLimit: &rlsconfv3.RateLimitPolicy{RequestsPerUnit: 2}}}})}
	a := &answers{}
	for range 50 {
		if err := s.handle(context.Background(), a, good); err != nil {
			t.Fatal(err)
		}
		good[0], good[1] = good[1], good[0] // as go-control-plane's server orders them: its own way each time
	}
	for range 50 {
		if err := s.handle(context.Background(), a, bad); err != nil {
			t.Fatal(err)
		}
	}
	if applies != 1 || a.acks != 50 || len(a.nacks) != 50 {
		t.Errorf("%d applies, %d ACKs, %d NACKs; want 1, 50, 50", applies, a.acks, len(a.nacks))
	}
	for result, want := range map[string]float64{resultApplied: 1, resultUnchanged: 49, resultRefused: 50} {
		if n := testutil.ToFloat64(s.responses.WithLabelValues(result)); n != want {
			t.Errorf("rate_limit_xds_responses_total{result=%q} = %v, want %v", result, n, want)
		}
	}
	if n := logs.FilterMessage("xDS RLS config refused; the running rules stay").Len(); n != 1 || !strings.Contains(a.nacks[49], "missing unit") {
		t.Errorf("the refusal logged %d times, NACK %q; want once, the reason", n, a.nacks[49])
	}
}

// The reason of a refusal reaches the server, whatever the config's text:
// a NACK is a proto3 string, which gRPC refuses to send unless it is valid
// UTF-8 (the subscription then ends, and the server never learns why), so
// neither the descriptor path an error shows (cut to 512 bytes) nor the
// message (cut to 4 KiB) may be cut inside a character.
func TestNackIsValidUTF8(t *testing.T) {
	// A path of 4 levels of 201 bytes, the innermost without a unit: the
	// path's cut falls inside an é.
	key := "x" + strings.Repeat("é", 100)
	d := &rlsconfv3.RateLimitDescriptor{Key: key, RateLimit: &rlsconfv3.RateLimitPolicy{RequestsPerUnit: 1}}
	for range 3 {
		d = &rlsconfv3.RateLimitDescriptor{Key: key, Descriptors: []*rlsconfv3.RateLimitDescriptor{d}}
	}
	// Errors past 4 KiB, mostly é: with keys of one length or the other,
	// the cut falls inside an é.
	many := func(key string) *rlsconfv3.RateLimitConfig {
		c := &rlsconfv3.RateLimitConfig{Name: "m", Domain: "m"}
		for i := range 10 {
			c.Descriptors = append(c.Descriptors, &rlsconfv3.RateLimitDescriptor{Key: fmt.Sprintf("%s%d", key, i),
				Value: strings.Repeat("é", 450), RateLimit: &rlsconfv3.RateLimitPolicy{RequestsPerUnit: 1}})
		}
		return c
	}
	for name, c := range map[string]*rlsconfv3.RateLimitConfig{
		"a long path":           {Name: "p", Domain: "p", Descriptors: []*rlsconfv3.RateLimitDescriptor{d}},
		"many errors":           many("k"),
		"many errors, one more": many("kk"),
	} {
		t.Run(name, func(t *testing.T) {
			s := New(Config{Log: zap.NewNop(), Apply: func(*rlsconfig.Config) (bool, error) { return true, nil }})
			a := &answers{}
			if err := s.handle(context.Background(), a, []*anypb.Any{anyOf(t, c)}); err != nil {
				t.Fatal(err)
			}
			if len(a.nacks) != 1 || !strings.Contains(a.nacks[0], "missing unit") {
				t.Fatalf("NACKs %q, want one with the reason", a.nacks)
			}
			msg := a.nacks[0]
			if _, err := proto.Marshal(&discoverygrpc.DiscoveryRequest{ErrorDetail: &status.Status{Message: msg}}); err != nil {
				t.Errorf("the NACK (%d bytes) cannot be sent: %v", len(msg), err)
			}
			if len(msg) > maxNack {
				t.Errorf("the NACK is %d bytes, over %d", len(msg), maxNack)
			}
		})
	}
}

// go-control-plane's server answers a NACK with the response it refused, at
// once, again and again: the limiter refuses it again at most once per
// refusedPace, rather than as fast as the two can exchange them (8 700
// NACKs a second, a third of a core, for as long as the config is
// published). Counted over the time the loop ran, so a slow machine sends
// fewer, never more.
func TestRepeatedRefusalIsPaced(t *testing.T) {
	s := New(Config{Log: zap.NewNop(), Apply: func(*rlsconfig.Config) (bool, error) { return true, nil }})
	bad := []*anypb.Any{anyOf(t, &rlsconfv3.RateLimitConfig{Name: "gw", Domain: "gw", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "api_key", RateLimit: &rlsconfv3.RateLimitPolicy{RequestsPerUnit: 2}}}})}
	a := &answers{}
	start := time.Now()
	for time.Since(start) < 500*time.Millisecond {
		if err := s.handle(context.Background(), a, bad); err != nil {
			t.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	t.Logf("%d NACKs in %v", len(a.nacks), elapsed.Round(time.Millisecond))
	if most := int(elapsed/refusedPace) + 1; len(a.nacks) > most {
		t.Errorf("%d NACKs in %v, want at most %d (one per %v)", len(a.nacks), elapsed.Round(time.Millisecond), most, refusedPace)
	}
	if n := testutil.ToFloat64(s.responses.WithLabelValues(resultRefused)); n != float64(len(a.nacks)) {
		t.Errorf("rate_limit_xds_responses_total{result=refused} = %v, %d NACKs", n, len(a.nacks))
	}
}
