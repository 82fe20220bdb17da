package rlsconfig

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/yamlkeys"
)

// erlKeys is envoyproxy/ratelimit's one list of valid keys. It checks every
// key of a file against this list, wherever the key stands, and refuses
// the file for any other; a key of the list where its reader does not look
// for it (unlimited beside key rather than under rate_limit) is ignored.
// A file it loads loads here, with the same meaning: such a key is ignored
// too, with a Warning. The extension's keys (rateLimitYAML) are known under
// rate_limit only.
var erlKeys = []string{
	"domain", "key", "value", "descriptors", "rate_limit", "unit", "requests_per_unit", "unlimited",
	"shadow_mode", "quota_mode", "name", "replaces", "detailed_metric", "value_to_metric",
	"share_threshold", "metadata",
}

// otherKeys holds the keys of a mapping that its type does not read (a
// yaml ",inline" map): an unknown key, or one of erlKeys out of place.
type otherKeys map[string]yaml.Node

// Warning is a key of a configuration file that the file's meaning does
// not use: one envoyproxy/ratelimit knows but ignores where it stands, or
// one it reads that ratewarden does not apply. The file loads all the same.
type Warning struct {
	File, Domain string
	Path         string // the descriptor path; empty at the top of the file
	Line         int
	Key          string
	Reason       string
}

func (w Warning) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: line %d", w.File, w.Line)
	if w.Domain != "" {
		b.WriteString(": domain " + w.Domain)
	}
	if w.Path != "" {
		b.WriteString(": descriptor " + w.Path)
	}
	fmt.Fprintf(&b, ": %s: %s", w.Key, w.Reason)
	return b.String()
}

// The keys of each mapping of a file, the candidates of an unknown key's
// suggestion.
var (
	fileKeys       = yamlkeys.Keys(reflect.TypeFor[fileYAML]())
	descriptorKeys = yamlkeys.Keys(reflect.TypeFor[descriptorYAML]())
	rateLimitKeys  = yamlkeys.Keys(reflect.TypeFor[rateLimitYAML]())
	replaceKeys    = yamlkeys.Keys(reflect.TypeFor[replaceYAML]())
)

// others checks the keys other of the mapping of the descriptor at entries
// (field prefixes the keys' names, "rate_limit." say), whose own keys are
// valid: a key of erlKeys is ignored with a warning saying where its reader
// looks for it (where), a key inside its value must still be one of
// erlKeys, and any other key is unknown, reported with the valid key it
// likely misspells. It reports whether every key was known.
func (w *walker) others(entries []rules.DescriptorEntry, field string, other otherKeys, where map[string]string, valid []string) bool {
	known := true
	for _, key := range slices.Sorted(maps.Keys(other)) {
		n := other[key]
		if !slices.Contains(erlKeys, key) {
			u := yamlkeys.Unknown{Line: n.Line, In: strings.TrimSuffix(field, "."), Key: key, Valid: valid}
			if field == "" && slices.Contains(rateLimitKeys, key) { // the extension, out of place
				u.Hint = "read under rate_limit"
			}
			w.errorf(entries, "", "%s", u)
			known = false
			continue
		}
		reason := where[key]
		if reason == "" {
			reason = "not read here"
		}
		w.warnf(entries, n.Line, field+key, "ignored here, as envoyproxy/ratelimit ignores it (%s)", reason)
		w.checkNested(entries, &n)
	}
	return known
}

// checkNested refuses the keys inside an ignored value that are not of
// erlKeys: envoyproxy/ratelimit checks every key of the file.
func (w *walker) checkNested(entries []rules.DescriptorEntry, n *yaml.Node) {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k := n.Content[i]; !slices.Contains(erlKeys, k.Value) {
				w.errorf(entries, "", "%s", yamlkeys.Unknown{Line: k.Line, Key: k.Value, Valid: erlKeys})
			}
		}
	}
	for _, c := range n.Content {
		w.checkNested(entries, c)
	}
}

func (w *walker) warnf(entries []rules.DescriptorEntry, line int, key, format string, args ...any) {
	w.warnings = append(w.warnings, Warning{File: w.file, Domain: w.domain, Path: shownPath(entries), Line: line, Key: key,
		Reason: fmt.Sprintf(format, args...)})
}

// Where envoyproxy/ratelimit reads each of its keys, for the warnings about
// one out of place, by the mapping it was found in.
var (
	notInFile = map[string]string{
		"key": "read in a descriptor", "value": "read in a descriptor", "rate_limit": "read in a descriptor",
		"shadow_mode": "read in a descriptor", "quota_mode": "read in a descriptor", "detailed_metric": "read in a descriptor",
		"value_to_metric": "read in a descriptor", "share_threshold": "read in a descriptor", "metadata": "read in a descriptor",
		"unit": "read under rate_limit", "requests_per_unit": "read under rate_limit", "unlimited": "read under rate_limit",
		"name": "read under rate_limit", "replaces": "read under rate_limit",
	}
	notInDescriptor = map[string]string{
		"domain": "read at the top of the file",
		"unit":   "read under rate_limit; this descriptor has no rate limit from it", "requests_per_unit": "read under rate_limit; this descriptor has no rate limit from it",
		"unlimited": "read under rate_limit; this descriptor is not made unlimited by it", "name": "read under rate_limit",
		"replaces": "read under rate_limit",
	}
	notInRateLimit = map[string]string{
		"domain": "read at the top of the file", "key": "read in a descriptor", "value": "read in a descriptor",
		"descriptors": "read in a descriptor; nothing below rate_limit is a descriptor", "rate_limit": "read in a descriptor",
		"shadow_mode": "read in a descriptor; this rate limit is not in shadow mode", "quota_mode": "read in a descriptor",
		"detailed_metric": "read in a descriptor", "value_to_metric": "read in a descriptor",
		"share_threshold": "read in a descriptor", "metadata": "read in a descriptor",
	}
	notInReplaces = map[string]string{} // a replaces entry reads name only
)
