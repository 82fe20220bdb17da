package httpapi

import (
	"net/http"

	"github.com/ratewarden/ratewarden/internal/jsonwire"
)

// unauthorized answers 401 with the challenge of realm.
func unauthorized(w http.ResponseWriter, realm, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="`+realm+`"`)
	jsonwire.WriteError(w, http.StatusUnauthorized, msg)
}
