package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// bearerTokens checks an "Authorization: Bearer <token>" header against the
// tokens of one API: the admin API's (one) or the decision API's (several,
// for rotation). Both sides are hashed first, so neither a token nor its
// length leaks through timing, and the token sent is compared with every
// token, so neither does which one it matched.
type bearerTokens [][sha256.Size]byte

func newBearerTokens(tokens ...string) bearerTokens {
	b := make(bearerTokens, len(tokens))
	for i, t := range tokens {
		b[i] = sha256.Sum256([]byte(t))
	}
	return b
}

// allows reports whether r carries one of the tokens.
func (b bearerTokens) allows(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	const scheme = "Bearer "
	if len(h) < len(scheme) || !strings.EqualFold(h[:len(scheme)], scheme) {
		return false
	}
	sum := sha256.Sum256([]byte(h[len(scheme):]))
	match := 0
	for i := range b {
		match |= subtle.ConstantTimeCompare(sum[:], b[i][:])
	}
	return match == 1
}

// unauthorized answers 401 with the challenge of realm.
func unauthorized(w http.ResponseWriter, realm, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="`+realm+`"`)
	writeError(w, http.StatusUnauthorized, msg)
}
