package jsonwire

import (
	"encoding/json"
	"net/http"
)

// Shared header values: net/http only reads them.
var (
	contentTypeJSON = []string{"application/json"}
	noStore         = []string{"no-store"}
)

// WriteJSON answers status with body, a JSON document: Content-Type
// application/json, and Cache-Control no-store, since every answer is about
// one moment.
func WriteJSON(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h["Content-Type"] = contentTypeJSON
	h["Cache-Control"] = noStore
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// WriteError answers status with {"error": msg}.
func WriteError(w http.ResponseWriter, status int, msg string) {
	WriteJSON(w, status, ErrorBody(msg))
}

// ErrorBody is the body of an error answer: {"error": msg} and a newline.
func ErrorBody(msg string) []byte {
	b, _ := json.Marshal(map[string]string{"error": msg})
	return append(b, '\n')
}
