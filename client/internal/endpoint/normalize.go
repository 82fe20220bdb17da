// Package endpoint is the client's copy of the limiter's
// internal/endpoint (a test of the limiter's module holds the two the
// same): the canonical form of a request path, which the client gives the
// limiter's rules and keys.
package endpoint

import (
	"path"
	"strings"
)

// Normalize returns the canonical form of a request path, the form rules
// and keys see: the query and fragment are cut, valid percent-escapes
// are decoded once (an invalid '%' stays as is), path parameters (from a
// ';' to the end of its segment) are removed, then the path is cleaned as
// by path.Clean ("//", "/./" and "/../" resolved, trailing '/' removed) with
// a leading '/' ensured. So "/api//login", "/api/./login",
// "/api/x/../login", "/api/%6Cogin", "/api/login;jsessionid=1" and
// "/api/login?x" all become "/api/login". Decoding %2F to '/' is deliberate:
// a backend that decodes it must not see a path the limiter did not. Path
// parameters go after decoding and before cleaning for the same reason:
// servlet containers and many frameworks route "/api/login;x" (and
// "%3B"-encoded ones) to "/api/login", and treat "..;" as "..".
//
// An already clean path is returned without allocating.
func Normalize(raw string) string {
	if i := strings.IndexAny(raw, "?#"); i >= 0 {
		raw = raw[:i]
	}
	if strings.IndexByte(raw, '%') >= 0 {
		raw = percentDecode(raw)
	}
	if strings.IndexByte(raw, ';') >= 0 {
		raw = cutPathParams(raw)
	}
	if raw == "" || raw[0] != '/' {
		raw = "/" + raw
	}
	return path.Clean(raw)
}

// cutPathParams removes every ';' and what follows it up to the next '/'.
func cutPathParams(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for {
		i := strings.IndexByte(s, ';')
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		j := strings.IndexByte(s[i:], '/')
		if j < 0 {
			return b.String()
		}
		s = s[i+j:]
	}
}

// percentDecode decodes every valid %XX once and keeps other bytes as they
// are.
func percentDecode(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' && i+2 < len(s) {
			hi, ok1 := unhex(s[i+1])
			lo, ok2 := unhex(s[i+2])
			if ok1 && ok2 {
				b.WriteByte(hi<<4 | lo)
				i += 2
				continue
			}
		}
		b.WriteByte(c)
	}
	return b.String()
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
