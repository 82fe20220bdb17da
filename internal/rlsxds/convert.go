// Package rlsxds follows an xDS management server for the RLS config, as
// envoyproxy/ratelimit does with CONFIG_TYPE=GRPC_XDS_SOTW (Envoy Gateway
// configures its rate limit service this way only): one aggregated
// (ADS) state-of-the-world subscription to RateLimitConfig resources, each
// response the whole config, applied or refused as one, acknowledged
// (ACK) or refused back (NACK) with the running rules kept, and the
// connection made again with a backoff after any failure.
//
// The resources are loaded by package rlsconfig, as the files of
// RLS_CONFIG_DIR are: each resource is one file named by the resource, so
// the same validation, errors and extension apply.
package rlsxds

import (
	"fmt"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/ratewarden/ratewarden/internal/rlsconfig"
)

// TypeURL is the resource type the limiter subscribes to.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// Load converts one state of the world, the resources of a response, and
// loads it as rlsconfig loads a directory: every resource a file named
// after it ("xds:" and its name; the index when it has none or shares it),
// in the order received. A resource of another type or that does not
// decode refuses the whole response.
func Load(resources []*anypb.Any) (*rlsconfig.Config, error) {
	files := make([]rlsconfig.File, 0, len(resources))
	seen := make(map[string]bool, len(resources))
	for i, res := range resources {
		if res.GetTypeUrl() != TypeURL {
			return nil, fmt.Errorf("resource %d: type %q, want %s", i, res.GetTypeUrl(), TypeURL)
		}
		var c rlsconfv3.RateLimitConfig
		if err := res.UnmarshalTo(&c); err != nil {
			return nil, fmt.Errorf("resource %d: %w", i, err)
		}
		name := "xds:" + c.GetName()
		if c.GetName() == "" || seen[name] {
			name = fmt.Sprintf("xds:[%d]%s", i, c.GetName())
		}
		seen[name] = true
		data, err := yaml.Marshal(fileOf(&c))
		if err != nil {
			return nil, fmt.Errorf("resource %s: %w", name, err)
		}
		files = append(files, rlsconfig.File{Name: name, Data: data})
	}
	return rlsconfig.Load(files)
}

// The YAML of a resource, in the keys of envoyproxy/ratelimit's files
// (its own conversion maps the same fields).
type fileYAML struct {
	Domain      string           `yaml:"domain"`
	Descriptors []descriptorYAML `yaml:"descriptors,omitempty"`
}

type descriptorYAML struct {
	Key            string           `yaml:"key"`
	Value          string           `yaml:"value,omitempty"`
	RateLimit      *rateLimitYAML   `yaml:"rate_limit,omitempty"`
	Descriptors    []descriptorYAML `yaml:"descriptors,omitempty"`
	ShadowMode     bool             `yaml:"shadow_mode,omitempty"`
	DetailedMetric bool             `yaml:"detailed_metric,omitempty"`
}

type rateLimitYAML struct {
	Name            string        `yaml:"name,omitempty"`
	Replaces        []replaceYAML `yaml:"replaces,omitempty"`
	Unit            string        `yaml:"unit,omitempty"`
	RequestsPerUnit *uint32       `yaml:"requests_per_unit,omitempty"`
	Unlimited       bool          `yaml:"unlimited,omitempty"`
}

type replaceYAML struct {
	Name string `yaml:"name"`
}

func fileOf(c *rlsconfv3.RateLimitConfig) fileYAML {
	return fileYAML{Domain: c.GetDomain(), Descriptors: descriptorsOf(c.GetDescriptors())}
}

func descriptorsOf(ds []*rlsconfv3.RateLimitDescriptor) []descriptorYAML {
	if len(ds) == 0 {
		return nil
	}
	out := make([]descriptorYAML, len(ds))
	for i, d := range ds {
		out[i] = descriptorYAML{Key: d.GetKey(), Value: d.GetValue(), Descriptors: descriptorsOf(d.GetDescriptors()),
			ShadowMode: d.GetShadowMode(), DetailedMetric: d.GetDetailedMetric()}
		if p := d.GetRateLimit(); p != nil {
			out[i].RateLimit = rateLimitOf(p)
		}
	}
	return out
}

// unitNames are the units of the proto by number: MONTH (5), YEAR (6) and
// WEEK (7) came after the go-control-plane/ratelimit release this module
// uses, which decodes them as bare numbers.
var unitNames = map[rlsconfv3.RateLimitUnit]string{
	rlsconfv3.RateLimitUnit_SECOND: "second", rlsconfv3.RateLimitUnit_MINUTE: "minute",
	rlsconfv3.RateLimitUnit_HOUR: "hour", rlsconfv3.RateLimitUnit_DAY: "day",
	5: "month", 6: "year", 7: "week",
}

// rateLimitOf is a policy in the files' terms. A unit of UNKNOWN (0) is
// left out, so a policy that is not unlimited is refused for its missing
// unit, as envoyproxy/ratelimit refuses "invalid rate limit unit"; an
// unlimited one with a unit or requests is refused as in a file.
func rateLimitOf(p *rlsconfv3.RateLimitPolicy) *rateLimitYAML {
	rl := &rateLimitYAML{Name: p.GetName(), Unlimited: p.GetUnlimited()}
	for _, r := range p.GetReplaces() {
		rl.Replaces = append(rl.Replaces, replaceYAML{Name: r.GetName()})
	}
	if u, ok := unitNames[p.GetUnit()]; ok {
		rl.Unit = u
	} else if p.GetUnit() != rlsconfv3.RateLimitUnit_UNKNOWN {
		rl.Unit = fmt.Sprintf("unit %d", p.GetUnit()) // refused by name
	}
	if n := p.GetRequestsPerUnit(); n != 0 || !p.GetUnlimited() {
		rl.RequestsPerUnit = &n
	}
	return rl
}
