package jsonwire

import (
	"encoding/json"
	"errors"
	"fmt"
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

// InputError is a caller's mistake: answered with Status and {"error": Msg}.
type InputError struct {
	Status int
	Msg    string
}

func (e *InputError) Error() string { return e.Msg }

// BadRequest is a 400 InputError.
func BadRequest(format string, args ...any) error {
	return &InputError{Status: http.StatusBadRequest, Msg: fmt.Sprintf(format, args...)}
}

// WriteInputError answers err: its status and message when it is an
// *InputError, else 500, and then it returns err, an error no caller
// should cause, for the caller to log. (The package logs nothing itself:
// the Go client reads JSON with it, and must not bring a logger to the
// applications that import it.)
func WriteInputError(w http.ResponseWriter, err error) (unexpected error) {
	var in *InputError
	if errors.As(err, &in) {
		WriteError(w, in.Status, in.Msg)
		return nil
	}
	WriteError(w, http.StatusInternalServerError, "internal error")
	return err
}
