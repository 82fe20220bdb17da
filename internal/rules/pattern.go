package rules

import (
	"errors"
	"strings"
	"unicode/utf8"
)

// maxPatternLen bounds an endpoint pattern.
const maxPatternLen = 1024

// endpointPattern is a compiled Ant-style endpoint pattern. A path is split
// into segments at '/' (the leading '/' starts the first segment; "/" has
// none):
//
//	?   matches one character (one UTF-8 sequence, or one invalid byte), never '/'
//	*   matches zero or more characters within a segment
//	**  as a whole segment, matches zero or more whole segments
//
// So "/api/**" matches "/api", "/api/x" and "/api/x/y"; "/api/*" matches
// "/api/x" but not "/api" nor "/api/x/y". Patterns match normalized paths
// (see endpoint.Normalize): they must start with '/', and contain no empty,
// "." or ".." segment, no trailing '/', and no '%' (write the decoded
// character). Matching does not allocate.
type endpointPattern struct {
	raw     string
	literal bool   // no wildcard: Match is string equality
	prefix  string // literal segments before the first wildcard, e.g. "/api/books"
	segs    []patternSegment
}

type patternSegment struct {
	text string
	deep bool // "**"
	wild bool // contains '*' or '?'
}

// compilePattern compiles an endpoint pattern.
func compilePattern(s string) (endpointPattern, error) {
	switch {
	case s == "":
		return endpointPattern{}, errors.New("must not be empty")
	case len(s) > maxPatternLen:
		return endpointPattern{}, errors.New("must be at most 1024 bytes")
	case s[0] != '/':
		return endpointPattern{}, errors.New("must start with /")
	case !utf8.ValidString(s):
		return endpointPattern{}, errors.New("must be valid UTF-8")
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c == 0x7f:
			return endpointPattern{}, errors.New("must not contain control characters")
		case c == '%':
			return endpointPattern{}, errors.New("must not contain % (patterns match decoded paths: write the character itself)")
		case c == '#':
			return endpointPattern{}, errors.New("must not contain #")
		}
	}
	p := endpointPattern{raw: s, literal: true}
	if s == "/" {
		p.prefix = "/"
		return p, nil
	}
	prefixDone := false
	for seg := range strings.SplitSeq(s[1:], "/") {
		switch {
		case seg == "":
			return endpointPattern{}, errors.New("must not contain an empty segment (// or a trailing /)")
		case seg == "." || seg == "..":
			return endpointPattern{}, errors.New("must not contain . or .. segments")
		case seg == "**":
			p.segs = append(p.segs, patternSegment{text: seg, deep: true})
		case strings.Contains(seg, "**"):
			return endpointPattern{}, errors.New("** must be a whole segment")
		default:
			p.segs = append(p.segs, patternSegment{text: seg, wild: strings.ContainsAny(seg, "*?")})
		}
		last := p.segs[len(p.segs)-1]
		if last.deep || last.wild {
			p.literal = false
			prefixDone = true
		} else if !prefixDone {
			p.prefix += "/" + seg
		}
	}
	return p, nil
}

// mustCompilePattern is compilePattern for patterns known to be valid; it
// panics otherwise.
func mustCompilePattern(s string) endpointPattern {
	p, err := compilePattern(s)
	if err != nil {
		panic("rules: pattern " + s + ": " + err.Error())
	}
	return p
}

// String returns the pattern as written.
func (p endpointPattern) String() string { return p.raw }

// Match reports whether path matches the pattern. A path that does not start
// with '/' matches nothing.
func (p endpointPattern) Match(path string) bool {
	if p.literal {
		return path == p.raw
	}
	if len(path) == 0 || path[0] != '/' || !strings.HasPrefix(path, p.prefix) {
		return false
	}
	return matchSegments(p.segs, path[1:])
}

// matchSegments matches segs against the '/'-separated segments of rest
// (none when rest is empty). "**" is a star over segments; the classic
// greedy match with one backtrack point is exact because a later star
// subsumes an earlier one.
func matchSegments(segs []patternSegment, rest string) bool {
	end := len(rest) + 1 // cursor past the last segment
	si := 0
	if rest == "" {
		si = end
	}
	pi, star, mark := 0, -1, 0
	for si < end {
		if pi < len(segs) && segs[pi].deep {
			star, mark = pi, si
			pi++
			continue
		}
		seg, next := segmentAt(rest, si)
		if pi < len(segs) && matchSegment(segs[pi], seg) {
			pi++
			si = next
			continue
		}
		if star >= 0 {
			_, mark = segmentAt(rest, mark)
			pi, si = star+1, mark
			continue
		}
		return false
	}
	for pi < len(segs) && segs[pi].deep {
		pi++
	}
	return pi == len(segs)
}

// segmentAt returns the segment of rest starting at i and the start of the
// next one (len(rest)+1 after the last).
func segmentAt(rest string, i int) (seg string, next int) {
	j := strings.IndexByte(rest[i:], '/')
	if j < 0 {
		return rest[i:], len(rest) + 1
	}
	return rest[i : i+j], i + j + 1
}

func matchSegment(ps patternSegment, s string) bool {
	if !ps.wild {
		return ps.text == s
	}
	return matchWild(ps.text, s)
}

// matchWild matches one segment with '*' and '?' (greedy, one backtrack
// point). Literal bytes compare byte-wise: the pattern is valid UTF-8 and
// every wildcard consumes whole sequences, so comparisons start on sequence
// boundaries.
func matchWild(pat, s string) bool {
	pi, si, star, mark := 0, 0, -1, 0
	for si < len(s) {
		if pi < len(pat) {
			switch c := pat[pi]; {
			case c == '*':
				star, mark = pi, si
				pi++
				continue
			case c == '?':
				_, n := utf8.DecodeRuneInString(s[si:])
				pi++
				si += n
				continue
			case c == s[si]:
				pi++
				si++
				continue
			}
		}
		if star >= 0 {
			_, n := utf8.DecodeRuneInString(s[mark:])
			mark += n
			pi, si = star+1, mark
			continue
		}
		return false
	}
	for pi < len(pat) && pat[pi] == '*' {
		pi++
	}
	return pi == len(pat)
}
