package config

import (
	"errors"
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

// tokens parses a comma-separated list of bearer tokens, refusing short
// ones, placeholders and characters a header cannot carry. Errors never
// show a token.
func tokens(v string) ([]string, error) {
	list := list(v)
	for i, t := range list {
		which := "the token"
		if len(list) > 1 {
			which = fmt.Sprintf("token %d of %d", i+1, len(list))
		}
		if why := badToken(t); why != "" {
			return list, fmt.Errorf("%s %s (generate one with: openssl rand -hex 32)", which, why)
		}
	}
	return list, nil
}

// adminToken parses ADMIN_TOKEN: one token, held to the rules of
// API_TOKENS; empty: none.
func adminToken(v string) (string, error) {
	if strings.Contains(v, ",") {
		return "", errors.New("expected one token, got a comma-separated list")
	}
	if _, err := tokens(v); err != nil {
		return "", err
	}
	return v, nil
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
