// Package rlsxds follows an xDS management server for the RLS config, as
// envoyproxy/ratelimit does with CONFIG_TYPE=GRPC_XDS_SOTW (Envoy Gateway
// configures its rate limit service this way only): one aggregated
// (ADS) state-of-the-world subscription to RateLimitConfig resources, each
// response the whole config, applied or refused as one, acknowledged
// (ACK) or refused back (NACK) with the running rules kept, and the
// connection made again with a backoff after any failure.
//
// The resources are loaded by package rlsconfig, as the files of
// RLS_CONFIG_DIR are: each resource is one rlsconfig.Document named by the
// resource, so the same validation, errors and bounds apply; the bounds
// are checked on a response's encoding before anything is decoded from it
// (see bounds.go).
package rlsxds

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"unicode/utf8"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/ratewarden/ratewarden/internal/rlsconfig"
)

// TypeURL is the resource type the limiter subscribes to.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// maxShownName bounds the part of a resource's name its errors show.
const maxShownName = 128

// Load converts one state of the world, the resources of a response, and
// loads it as rlsconfig loads a directory: every resource a document named
// after it ("xds:" and its name; the index too when it has none, shares
// it or is cut to maxShownName bytes), in the order received. A resource
// of another type, one that does not decode or any past the bounds (see
// bounds.go) refuses the whole response.
func Load(resources []*anypb.Any) (*rlsconfig.Config, error) {
	return load(resources, hashOf(resources))
}

// hashOf is the hex SHA-256 of the resources' types and encodings, in
// whatever order they come (go-control-plane's server sends a snapshot's
// resources in an order of its own each time): the Config's Hash.
func hashOf(resources []*anypb.Any) string {
	sums := make([][sha256.Size]byte, len(resources))
	for i, r := range resources {
		h := sha256.New()
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(r.GetTypeUrl()))))
		h.Write([]byte(r.GetTypeUrl()))
		h.Write(r.GetValue())
		h.Sum(sums[i][:0])
	}
	slices.SortFunc(sums, func(a, b [sha256.Size]byte) int { return bytes.Compare(a[:], b[:]) })
	h := sha256.New()
	for _, s := range sums {
		h.Write(s[:])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// load is Load of resources whose hashOf is hash.
func load(resources []*anypb.Any, hash string) (*rlsconfig.Config, error) {
	if len(resources) > rlsconfig.MaxFiles || tooMany(resources) {
		return nil, fmt.Errorf("more than %d resources in the response (the bound of a configuration)", rlsconfig.MaxFiles)
	}
	docs := make([]rlsconfig.Document, 0, len(resources))
	seen := make(map[string]bool, len(resources))
	budget := rlsconfig.MaxDescriptors
	for i, res := range resources {
		if res.GetTypeUrl() != TypeURL {
			return nil, fmt.Errorf("resource %d: type %q, want %s", i, cut(res.GetTypeUrl()), TypeURL)
		}
		name := nameOf(res.GetValue())
		shown := "xds:" + name
		if name == "" || seen[shown] || len(name) > maxShownName {
			shown = fmt.Sprintf("xds:[%d]%s", i, cut(name))
		}
		seen[shown] = true
		if len(res.GetValue()) > rlsconfig.MaxFileSize {
			return nil, fmt.Errorf("%s: larger than %d bytes (4 MiB)", shown, rlsconfig.MaxFileSize)
		}
		s := scan{name: shown, budget: &budget}
		if err := s.config(res.GetValue()); err != nil {
			return nil, err
		}
		var c rlsconfv3.RateLimitConfig
		if err := res.UnmarshalTo(&c); err != nil {
			return nil, fmt.Errorf("%s: %w", shown, err)
		}
		docs = append(docs, rlsconfig.Document{Name: shown, Domain: c.GetDomain(), Descriptors: descriptorsOf(c.GetDescriptors())})
	}
	return rlsconfig.LoadDocuments(docs, hash)
}

// cut is s, cut to maxShownName bytes.
func cut(s string) string {
	if len(s) > maxShownName {
		return prefix(s, maxShownName) + "..."
	}
	return s
}

// prefix is s cut to at most n bytes, never inside a character.
func prefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// descriptorsOf are ds in rlsconfig's terms (envoyproxy/ratelimit's own
// conversion maps the same fields). Its depth is bounded by the scan.
func descriptorsOf(ds []*rlsconfv3.RateLimitDescriptor) []rlsconfig.Descriptor {
	if len(ds) == 0 {
		return nil
	}
	out := make([]rlsconfig.Descriptor, len(ds))
	for i, d := range ds {
		out[i] = rlsconfig.Descriptor{Key: d.GetKey(), Value: d.GetValue(), Descriptors: descriptorsOf(d.GetDescriptors()),
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
func rateLimitOf(p *rlsconfv3.RateLimitPolicy) *rlsconfig.RateLimit {
	rl := &rlsconfig.RateLimit{Name: p.GetName(), Unlimited: p.GetUnlimited()}
	for _, r := range p.GetReplaces() {
		rl.Replaces = append(rl.Replaces, r.GetName())
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
