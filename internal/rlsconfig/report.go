package rlsconfig

import (
	"fmt"
	"strings"

	"github.com/ratewarden/ratewarden/internal/rules"
)

// WriteReport describes a valid directory, dir, whose configuration is c,
// compiled into set, as "limiter rules check --rls-dir" prints it: its
// descriptor rules in evaluation order, then its domains and the files
// defining them.
func WriteReport(b *strings.Builder, dir string, c *Config, set *rules.Set) {
	rs := set.Rules()
	fmt.Fprintf(b, "Checking %s (RLS config)\n  SUCCESS: %d descriptor %s found in %d %s\n\n", dir, len(rs),
		rules.Plural(int64(len(rs)), "rule", "rules"), len(c.Files), rules.Plural(int64(len(c.Files)), "file", "files"))
	files := make(map[string]string, len(c.Domains))
	for _, d := range c.Domains {
		files[d.Name] = d.File
	}
	for _, r := range rs {
		rules.WriteRule(b, r, files)
	}
	domains := make([]string, len(c.Domains))
	for i, d := range c.Domains {
		domains[i] = fmt.Sprintf("%s (%s, %d %s)", d.Name, d.File, d.Rules, rules.Plural(int64(d.Rules), "rule", "rules"))
	}
	if len(domains) == 0 {
		domains = []string{"none"}
	}
	fmt.Fprintf(b, "domains: %s\n", strings.Join(domains, "; "))
	if len(c.Warnings) > 0 {
		fmt.Fprintf(b, "warnings: %d %s not used (loaded as envoyproxy/ratelimit loads them)\n", len(c.Warnings),
			rules.Plural(int64(len(c.Warnings)), "key", "keys"))
		for _, w := range c.Warnings {
			b.WriteString("  " + w.String() + "\n")
		}
	}
}
