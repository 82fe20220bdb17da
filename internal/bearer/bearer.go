// Package bearer checks "Authorization: Bearer <token>" credentials in
// constant time. The decision API (package httpapi), Envoy's rate limit
// API (package rlsapi, gRPC metadata and POST /json) and the admin API
// (package adminapi, with its own token) share it, so one API_TOKENS list
// admits a caller on every transport alike, and every token is checked by
// the same code.
package bearer

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// Tokens are the tokens of one API: the admin API's (one) or the decision
// APIs' (several, for rotation). Both sides are hashed first, so neither a
// token nor its length leaks through timing, and the token sent is
// compared with every token, so neither does which one it matched.
type Tokens [][sha256.Size]byte

// New returns the tokens to accept.
func New(tokens ...string) Tokens {
	b := make(Tokens, len(tokens))
	for i, t := range tokens {
		b[i] = sha256.Sum256([]byte(t))
	}
	return b
}

// scheme is the authorization scheme, compared case-insensitively (RFC
// 9110 section 11.1).
const scheme = "Bearer "

// Allows reports whether header, the value of an Authorization header (or
// of gRPC's authorization metadata), carries one of the tokens.
func (b Tokens) Allows(header string) bool { return allows(b, header) }

// AllowsBytes is Allows for a header value held in bytes (fasthttp's), so
// that checking it costs no copy.
func (b Tokens) AllowsBytes(header []byte) bool { return allows(b, header) }

func allows[T string | []byte](b Tokens, header T) bool {
	if len(header) < len(scheme) || !strings.EqualFold(string(header[:len(scheme)]), scheme) {
		return false
	}
	sum := sha256.Sum256([]byte(header[len(scheme):]))
	match := 0
	for i := range b {
		match |= subtle.ConstantTimeCompare(sum[:], b[i][:])
	}
	return match == 1
}

// AllowsRequest reports whether r's Authorization header carries one of
// the tokens.
func (b Tokens) AllowsRequest(r *http.Request) bool {
	return b.Allows(r.Header.Get("Authorization"))
}
