package rules

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
)

// wildcardSiblings is n descriptor rules of one domain, each a wildcard
// value of one key at the top level (/api/v<i>/*), as a large gateway
// config has them.
func wildcardSiblings(n int) *File {
	f := &File{Rules: make([]Rule, n)}
	for i := range f.Rules {
		f.Rules[i] = Rule{ID: fmt.Sprintf("w%d", i), Priority: 100, Algorithm: decide.FixedWindow,
			OnRedisFailure: FailLocal, Limits: []Limit{{Requests: 10, Per: Duration(time.Second)}},
			Descriptor: &DescriptorMatch{Domain: "edge", Entries: []DescriptorEntry{{Key: "path", Value: fmt.Sprintf("/api/v%d/*", i)}}}}
	}
	return f
}

func BenchmarkCompileWildcardSiblings(b *testing.B) {
	for _, n := range []int{16000, 20000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			f := wildcardSiblings(n)
			for b.Loop() {
				if _, err := Compile(f, Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A request of 64 descriptors none of whose values a wildcard of the
// 20 000 matches.
func BenchmarkMatchDescriptorsMiss(b *testing.B) {
	s, err := Compile(wildcardSiblings(20000), Options{})
	if err != nil {
		b.Fatal(err)
	}
	req := &DescriptorRequest{Domain: "edge"}
	for i := range 64 {
		req.Descriptors = append(req.Descriptors, Descriptor{Entries: []Entry{{Key: "path", Value: fmt.Sprintf("/other/%d", i)}}, Cost: 1})
	}
	now := time.Now()
	out := make([]Applied, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		if out = s.MatchDescriptors(req, now, out[:0]); len(out) != 0 {
			b.Fatal("matched")
		}
	}
}

// The shapes the index does not narrow: 20 000 wildcards that share their
// first and last parts (one group, tried one by one), and 22 500 whose
// first and last parts all fit the value (a group each, every one tried).
// A request of 64 descriptors of a 1 KiB value none of them matches.
func BenchmarkMatchDescriptorsMissUnindexed(b *testing.B) {
	shapes := map[string]func(i int) string{
		"shared first and last": func(i int) string { return fmt.Sprintf("/api/*x%d*/end", i) },
		"every part fits": func(i int) string {
			return strings.Repeat("a", 1+i/150) + "*z*" + strings.Repeat("b", 1+i%150)
		},
	}
	values := map[string]string{
		"shared first and last": "/api/" + strings.Repeat("v", 1010) + "/end",
		"every part fits":       strings.Repeat("a", 512) + strings.Repeat("b", 512),
	}
	for name, shape := range shapes {
		b.Run(name, func(b *testing.B) {
			f := wildcardSiblings(22500)
			for i := range f.Rules {
				f.Rules[i].Descriptor.Entries[0].Value = shape(i)
			}
			s, err := Compile(f, Options{})
			if err != nil {
				b.Fatal(err)
			}
			req := &DescriptorRequest{Domain: "edge"}
			for range 64 {
				req.Descriptors = append(req.Descriptors, Descriptor{Entries: []Entry{{Key: "path", Value: values[name]}}, Cost: 1})
			}
			now := time.Now()
			out := make([]Applied, 0, 64)
			for b.Loop() {
				if out = s.MatchDescriptors(req, now, out[:0]); len(out) != 0 {
					b.Fatal("matched")
				}
			}
		})
	}
}
