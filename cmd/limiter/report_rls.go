package main

import (
	"fmt"
	"strings"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/rlsconfig"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// writeRLSReport describes a valid directory, dir, whose configuration is c,
// compiled into set, as "limiter rules check --rls-dir" prints it: its
// descriptor rules in evaluation order, then its domains and the files
// defining them.
func writeRLSReport(b *strings.Builder, dir string, c *rlsconfig.Config, set *rules.Set) {
	rs := set.Rules()
	fmt.Fprintf(b, "Checking %s (RLS config)\n  SUCCESS: %d descriptor %s found in %d %s\n\n", dir, len(rs),
		plural(int64(len(rs)), "rule", "rules"), len(c.Files), plural(int64(len(c.Files)), "file", "files"))
	files := make(map[string]string, len(c.Domains))
	for _, d := range c.Domains {
		files[d.Name] = d.File
	}
	for _, r := range rs {
		writeRule(b, r, files)
	}
	domains := make([]string, len(c.Domains))
	for i, d := range c.Domains {
		domains[i] = fmt.Sprintf("%s (%s, %d %s)", d.Name, d.File, d.Rules, plural(int64(d.Rules), "rule", "rules"))
	}
	if len(domains) == 0 {
		domains = []string{"none"}
	}
	fmt.Fprintf(b, "domains: %s\n", strings.Join(domains, "; "))
	if len(c.Warnings) > 0 {
		fmt.Fprintf(b, "warnings: %d %s not used (loaded as envoyproxy/ratelimit loads them)\n", len(c.Warnings),
			plural(int64(len(c.Warnings)), "key", "keys"))
		for _, w := range c.Warnings {
			b.WriteString("  " + w.String() + "\n")
		}
	}
}

// writeDescriptor describes what a descriptor rule matches (the domain,
// from file when known, and the path) and its limits, which an unlimited
// rule and a rule of 0 requests answer without Redis.
func writeDescriptor(b *strings.Builder, r *rules.Rule, file string) {
	d := r.Descriptor
	domain := d.Domain
	if file != "" {
		domain += " (" + file + ")"
	}
	writeField(b, "domain:", domain)
	writeField(b, "path:", rules.DescriptorPath(d.Entries))
	if d.Name != "" {
		writeField(b, "name:", d.Name)
	}
	if len(d.Replaces) > 0 {
		writeField(b, "replaces:", strings.Join(d.Replaces, ", ")+" (not applied when this rule matches too)")
	}
	var flags []string
	for _, e := range d.Entries {
		if e.ShareThreshold {
			flags = append(flags, fmt.Sprintf("share_threshold on %s (the values matching %s count as one)", e.Key, e.Value))
		}
		if e.DetailedMetric {
			flags = append(flags, "detailed_metric on "+e.Key)
		}
		if e.ValueToMetric {
			flags = append(flags, "value_to_metric on "+e.Key)
		}
	}
	if len(flags) > 0 {
		writeField(b, "flags:", strings.Join(flags, "; "))
	}
	if r.Algorithm == decide.Concurrency {
		release := "hold_id (a stream-done descriptor ending in (hold, <id answered>) releases that hold)"
		if d.Release == rules.ReleaseOldest {
			release = "oldest (one naming no hold id releases the key's oldest hold)"
		}
		writeField(b, "release:", release)
	}
	switch {
	case d.Unlimited:
		writeField(b, "limits:", "unlimited (answered OK without Redis)")
	case r.Blocks():
		writeField(b, "limits:", describeLimits(r.Algorithm, r.Limits)+" (denies every request, without Redis)")
	default:
		writeField(b, "limits:", describeLimits(r.Algorithm, r.Limits))
	}
	if r.Reserves() {
		writeField(b, "reserve:", fmt.Sprintf("a request-time descriptor (hits_addend 0) reserves %d units, admitted only if they fit, "+
			"until the stream-done descriptor ending in (hold, <id answered>) settles them with its hits_addend; "+
			"one nobody settles lapses after %s, spent", r.Reserve, reportDuration(r.ReserveLifetime())))
	}
}
