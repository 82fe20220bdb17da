package rlsconfig_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/internal/rlsconfig"
)

// wildcardFile is a configuration file of n wildcard siblings at the top
// level (/api/v<i>/*).
func wildcardFile(n int) rlsconfig.File {
	var b strings.Builder
	b.WriteString("domain: edge\ndescriptors:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - {key: path, value: \"/api/v%d/*\", rate_limit: {unit: second, requests_per_unit: 10}}\n", i)
	}
	return rlsconfig.File{Name: "edge.yaml", Data: []byte(b.String())}
}

// Loading a file of wildcard siblings: parse, convert, and the compile
// that checks them together.
func BenchmarkLoadWildcardSiblings(b *testing.B) {
	for _, n := range []int{16000, 20000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			files := []rlsconfig.File{wildcardFile(n)}
			for b.Loop() {
				if _, err := rlsconfig.Load(files); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
