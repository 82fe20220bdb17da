package rlsconfig

import "github.com/ratewarden/ratewarden/internal/rules"

// Document is one configuration decoded by another reader than the files':
// what an xDS RateLimitConfig resource carries (package rlsxds).
// LoadDocuments validates and converts it exactly as Load does the file of
// the same content.
type Document struct {
	// Name names the document in errors and in Config.Files, as a file's
	// name does.
	Name        string
	Domain      string
	Descriptors []Descriptor
}

// Descriptor is one descriptor of a Document: the keys of a file's
// descriptor that envoyproxy/ratelimit's RateLimitConfig has.
type Descriptor struct {
	Key, Value     string
	RateLimit      *RateLimit
	ShadowMode     bool
	DetailedMetric bool
	Descriptors    []Descriptor
}

// RateLimit is a Descriptor's rate_limit.
type RateLimit struct {
	Name     string
	Replaces []string
	// Unit is a unit's name, as a file writes it; empty: none.
	Unit string
	// RequestsPerUnit is nil when left out.
	RequestsPerUnit *uint32
	Unlimited       bool
}

// LoadDocuments validates and converts docs as Load does files of the same
// content: the same errors (each naming the document), rule ids, bounds and
// warnings. Config.Files are the documents' names and Config.Hash is hash,
// the caller's digest of their content.
func LoadDocuments(docs []Document, hash string) (*Config, error) {
	l := newLoader(hash)
	for _, d := range docs {
		l.add(d.Name, l.convert(d.Name, d.Domain, descriptorsYAML(d.Descriptors, 1), nil))
	}
	return l.finish()
}

// descriptorsYAML are ds in the files' terms. Below rules.MaxEntries
// levels only the count of nested descriptors matters (they are refused),
// so they are not converted: the depth of what is built stays bounded
// whatever the depth of ds.
func descriptorsYAML(ds []Descriptor, depth int) []descriptorYAML {
	if len(ds) == 0 {
		return nil
	}
	out := make([]descriptorYAML, len(ds))
	if depth > rules.MaxEntries {
		return out
	}
	for i, d := range ds {
		out[i] = descriptorYAML{Key: d.Key, Value: d.Value, ShadowMode: d.ShadowMode, DetailedMetric: d.DetailedMetric,
			Descriptors: descriptorsYAML(d.Descriptors, depth+1)}
		if rl := d.RateLimit; rl != nil {
			y := &rateLimitYAML{Name: rl.Name, RequestsPerUnit: rl.RequestsPerUnit, Unlimited: rl.Unlimited}
			if rl.Unit != "" {
				y.Unit = &rl.Unit
			}
			for _, r := range rl.Replaces {
				y.Replaces = append(y.Replaces, replaceYAML{Name: r})
			}
			out[i].RateLimit = y
		}
	}
	return out
}
