package config

import (
	"fmt"
	"strings"
)

// MinTokenBytes is the shortest bearer token accepted: 16 bytes of
// `openssl rand -hex 32` or the like cannot be guessed, and a short value is
// more likely a test value left in place than a secret.
const MinTokenBytes = 16

// placeholderMarks are in the token placeholders the deployment files ship
// (docker-compose.yml, deploy/kubernetes/secret.yaml): such a value means the
// deployer has not set a token yet.
var placeholderMarks = []string{"change-me", "changeme", "replace-me", "replaceme"}

// tokens reads a comma-separated list of bearer tokens (one for
// ADMIN_TOKEN), refusing short ones, placeholders and characters a header
// cannot carry. Errors never show a token.
func (e *env) tokens(name string) []string {
	list := e.list(name, "")
	for i, t := range list {
		which := "the token"
		if len(list) > 1 {
			which = fmt.Sprintf("token %d of %d", i+1, len(list))
		}
		if why := badToken(t); why != "" {
			e.errs = append(e.errs, fmt.Errorf("%s: %s %s (generate one with: openssl rand -hex 32)", name, which, why))
		}
	}
	return list
}

func badToken(t string) string {
	lower := strings.ToLower(t)
	for _, m := range placeholderMarks {
		if strings.Contains(lower, m) {
			return "is a placeholder from the deployment files"
		}
	}
	if len(t) < MinTokenBytes {
		return fmt.Sprintf("is %d bytes, expected at least %d", len(t), MinTokenBytes)
	}
	for i := 0; i < len(t); i++ {
		if t[i] <= ' ' || t[i] > '~' {
			return "has a character other than printable ASCII"
		}
	}
	return ""
}
