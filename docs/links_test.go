// Package docs_test checks the documentation: README.md and CHANGELOG.md at
// the root and the pages of docs/. Every relative link must reach a file of the repository,
// and every #anchor a heading of the page it names, so a renamed heading or
// a moved page cannot leave a reader at a dead end.
package docs_test

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// maxPageBytes bounds the front page and the performance page: a newcomer
// reads README.md first, and docs/performance.md states conclusions, not
// the history of every run.
const maxPageBytes = 15 * 1024

// page is one Markdown file: where it is, its link targets and the anchors
// its headings define.
type page struct {
	path    string // relative to the repository root, slash-separated
	links   []link
	anchors map[string]bool
}

// link is one inline link or image target of a page.
type link struct {
	line   int
	target string
}

var (
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	heading    = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	linkText   = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
)

// readPage parses the Markdown file at root/rel.
func readPage(t *testing.T, root, rel string) page {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	p := page{path: rel, anchors: map[string]bool{}}
	seen := map[string]int{}
	inFence := false
	for i, line := range strings.Split(string(src), "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			p.anchors[m[1]] = true
		}
		if m := heading.FindStringSubmatch(line); m != nil {
			slug := slugify(m[2])
			if n, dup := seen[slug]; dup {
				seen[slug] = n + 1
				slug = fmt.Sprintf("%s-%d", slug, n+1)
			} else {
				seen[slug] = 0
			}
			p.anchors[slug] = true
		}
		for _, m := range inlineLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
			p.links = append(p.links, link{line: i + 1, target: m[1]})
		}
	}
	return p
}

// slugify is GitHub's anchor for a heading: the rendered text in lower
// case, every character but letters, digits, spaces, '-' and '_' removed,
// spaces turned into '-'. (Duplicates get -1, -2, ... in readPage.)
func slugify(h string) string {
	h = linkText.ReplaceAllString(h, "$1")
	h = strings.ReplaceAll(h, "`", "")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// pages lists README.md, CHANGELOG.md and docs/*.md, relative to the
// repository root.
func pages(t *testing.T, root string) []string {
	t.Helper()
	found, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md", "CHANGELOG.md"}
	for _, f := range found {
		out = append(out, "docs/"+filepath.Base(f))
	}
	return out
}

func TestLinksResolve(t *testing.T) {
	root := ".."
	parsed := map[string]page{}
	get := func(rel string) page {
		if p, ok := parsed[rel]; ok {
			return p
		}
		p := readPage(t, root, rel)
		parsed[rel] = p
		return p
	}
	for _, rel := range pages(t, root) {
		p := get(rel)
		for _, l := range p.links {
			u, err := url.Parse(l.target)
			if err != nil {
				t.Errorf("%s:%d: link %q: %v", rel, l.line, l.target, err)
				continue
			}
			if u.Scheme != "" || u.Host != "" {
				continue // an outside address: not checked here
			}
			target := rel
			if u.Path != "" {
				target = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(rel), u.Path)))
				if strings.HasPrefix(target, "../") {
					t.Errorf("%s:%d: link %q leaves the repository", rel, l.line, l.target)
					continue
				}
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(target))); err != nil {
					t.Errorf("%s:%d: link %q: no file %s", rel, l.line, l.target, target)
					continue
				}
			}
			if u.Fragment == "" {
				continue
			}
			if !strings.HasSuffix(target, ".md") {
				t.Errorf("%s:%d: link %q: an anchor into %s, which is not a Markdown page", rel, l.line, l.target, target)
				continue
			}
			if !get(target).anchors[u.Fragment] {
				t.Errorf("%s:%d: link %q: %s has no heading with the anchor #%s", rel, l.line, l.target, target, u.Fragment)
			}
		}
	}
}

func TestPageSizes(t *testing.T) {
	for _, rel := range []string{"README.md", "docs/performance.md"} {
		info, err := os.Stat(filepath.Join("..", filepath.FromSlash(rel)))
		if err != nil {
			t.Fatal(err)
		}
		if info.Size() > maxPageBytes {
			t.Errorf("%s is %d bytes, over the %d a page that is read first may take: move reference to a page of docs/", rel, info.Size(), maxPageBytes)
		}
	}
}

func TestReadmeStatesTheSetUpCommands(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"make run", "make test"} {
		if !strings.Contains(string(src), cmd) {
			t.Errorf("README.md does not state %q, one of the two set-up commands", cmd)
		}
	}
}

func TestSlugify(t *testing.T) {
	for _, tc := range []struct{ heading, want string }{
		{"Security model", "security-model"},
		{"`POST /v1/check/batch`", "post-v1checkbatch"},
		{"`/v1/auth` — forward auth", "v1auth--forward-auth"},
		{"One round trip at a time (`REDIS_PIPELINE_WAIT`)", "one-round-trip-at-a-time-redis_pipeline_wait"},
		{"Descriptor rules (Envoy's rate limit API)", "descriptor-rules-envoys-rate-limit-api"},
		{"IPv6 clients: one prefix is one client", "ipv6-clients-one-prefix-is-one-client"},
		{"See [the API](api.md)", "see-the-api"},
	} {
		t.Run(tc.heading, func(t *testing.T) {
			if got := slugify(tc.heading); got != tc.want {
				t.Errorf("slugify(%q) = %q, want %q", tc.heading, got, tc.want)
			}
		})
	}
}
