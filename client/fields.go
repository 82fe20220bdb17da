package client

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode/utf8"

	"github.com/ratewarden/ratewarden/client/internal/endpoint"
)

// The fields of a check or a report come from the requests an application
// serves (a path, a user id from a session): an attacker picks them. The
// limiter refuses (400) a field it could not keep in an event, and a
// refused check must not be left to the failure policy, which would admit
// it. So the client sends every field in a form the limiter accepts: a
// control character or a byte that is not UTF-8 percent-encoded ("\x00" is
// "%00"), as the limiter's rate limit API (Envoy's) escapes the paths it
// gets, and a field over its bound cut and marked with a digest of the
// whole, so that two long values stay two keys.

// The decision API's bounds, in bytes unless said otherwise (docs/api.md).
const (
	maxEndpoint   = 8 << 10
	maxUserID     = 512
	maxTier       = 64
	maxMethod     = 32
	maxAttributes = 32 // entries
	maxAttrName   = 64
	maxAttrValue  = 1024
	maxCost       = 1_000_000 // units
	maxBody       = 64 << 10
	maxBatch      = 100 // checks or reports in one call
	minStatus     = 100
	maxStatus     = 599
)

// cutMark ends a value cut to its bound, before the digest of the whole
// value: "…" and 32 hex digits.
const (
	cutMark    = "…"
	cutMarkLen = len(cutMark) + 32
)

// textField returns s as the limiter accepts a user id, a tier or an
// attribute (name or value) of at most max bytes: escaped (escapeText),
// then cut and marked (cutText) when longer. s itself when it is already
// so, as it nearly always is: no allocation.
func textField(s string, max int) string {
	s = escapeText(s)
	if len(s) <= max {
		return s
	}
	return cutText(s, max-cutMarkLen)
}

// wireEndpoint returns what the client sends as the endpoint s (a path,
// or a route's pattern) so that the limiter, which normalizes what it gets
// (query cut, percent-escapes decoded, path cleaned), sees what its rate
// limit API makes of the same path: normalized, then escaped
// (escapeText), and cut and marked when the form sent would be over
// maxEndpoint. The '%', '?' and '#' of that form are sent percent-encoded,
// so that the limiter's normalization gives it back unchanged. An empty s
// stays empty: the limiter refuses it as it always did.
func wireEndpoint(s string) string {
	if s == "" {
		return s
	}
	e := escapeText(endpoint.Normalize(s))
	w := protectPath(e)
	if len(w) <= maxEndpoint {
		return w
	}
	// The cut is counted in bytes sent: 3 for each byte protectPath encodes.
	n, sent := 0, 0
	for ; n < len(e); n++ {
		size := 1
		if pathSpecial(e[n]) {
			size = 3
		}
		if sent+size > maxEndpoint-cutMarkLen {
			break
		}
		sent += size
	}
	return protectPath(cutText(e, n))
}

// cutText returns the first n bytes of s (fewer, to end on a character
// boundary) marked with the digest of the whole of s.
func cutText(s string, n int) string {
	for n > 0 && n < len(s) && !utf8.RuneStart(s[n]) {
		n--
	}
	sum := sha256.Sum256([]byte(s))
	var b strings.Builder
	b.Grow(n + cutMarkLen)
	b.WriteString(s[:n])
	b.WriteString(cutMark)
	var hx [32]byte
	hex.Encode(hx[:], sum[:16])
	b.Write(hx[:])
	return b.String()
}

// pathSpecial reports whether the limiter's normalization of an endpoint
// would read c ('%' starts an escape, '?' and '#' end the path): such a
// byte of a normalized endpoint is sent percent-encoded.
func pathSpecial(c byte) bool { return c == '%' || c == '?' || c == '#' }

// protectPath returns e with every pathSpecial byte percent-encoded.
func protectPath(e string) string {
	if !strings.ContainsAny(e, "%?#") {
		return e
	}
	var b strings.Builder
	b.Grow(len(e) + 8)
	for i := 0; i < len(e); i++ {
		if c := e[i]; pathSpecial(c) {
			b.WriteByte('%')
			b.WriteByte(upperHex[c>>4])
			b.WriteByte(upperHex[c&0xf])
			continue
		}
		b.WriteByte(e[i])
	}
	return b.String()
}

const upperHex = "0123456789ABCDEF"

// hasControl reports whether s holds an ASCII control character.
func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return true
		}
	}
	return false
}

// escapeText returns s with every control character and every byte that
// is not part of UTF-8 percent-encoded ("/a\x00" becomes "/a%00"), s
// itself when it has none: the limiter's escape of the endpoints of its
// rate limit API (event.EscapeEndpoint; a test holds the two equal).
func escapeText(s string) string {
	if !hasControl(s) && utf8.ValidString(s) {
		return s
	}
	b := make([]byte, 0, len(s)+16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if c := s[i]; (r == utf8.RuneError && size == 1) || c < 0x20 || c == 0x7f {
			b = append(b, '%', upperHex[c>>4], upperHex[c&0xf])
			i++
			continue
		}
		b = append(b, s[i:i+size]...)
		i += size
	}
	return string(b)
}

// validMethod reports whether m is a method the limiter accepts: 1 to
// maxMethod ASCII letters, '-' or '_'. A check or report with another is
// sent without one (the limiter counts it as GET), as the rate limit API
// takes a request whose method it cannot read.
func validMethod(m string) bool {
	if m == "" || len(m) > maxMethod {
		return false
	}
	for i := 0; i < len(m); i++ {
		c := m[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
