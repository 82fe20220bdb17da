package httpapi

import "net/http"

// unauthorized answers 401 with the challenge of realm.
func unauthorized(w http.ResponseWriter, realm, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="`+realm+`"`)
	writeError(w, http.StatusUnauthorized, msg)
}
