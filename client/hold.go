package client

import "fmt"

// A hold id is what the limiter answers in a check's "hold" and reads back
// in a report's: 16 random bytes, in 22 base64url characters without
// padding. The limiter refuses (400) a report whose hold is anything else,
// and with it the whole batch the report went out in: the client refuses
// such a hold before it is sent, and a check's answer holding one is not
// the limiter's.

// holdLen is the length of a hold id.
const holdLen = 22

// errBadHold is why a hold id is refused.
var errBadHold = fmt.Errorf("not a hold id (the %d base64url characters a check answered in hold)", holdLen)

// validHold reports whether id is a hold id: 22 characters of the base64url
// alphabet that decode to 16 bytes, the 4 bits left over zero (the strict
// decoding the limiter applies). It allocates nothing.
func validHold(id string) bool {
	if len(id) != holdLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if base64URLValue(id[i]) < 0 {
			return false
		}
	}
	// 22 characters carry 132 bits: the last one's low 4 are padding.
	return base64URLValue(id[holdLen-1])&0xf == 0
}

// base64URLValue is the value of c in the base64url alphabet, -1 when it
// is not in it.
func base64URLValue(c byte) int {
	switch {
	case c >= 'A' && c <= 'Z':
		return int(c - 'A')
	case c >= 'a' && c <= 'z':
		return int(c-'a') + 26
	case c >= '0' && c <= '9':
		return int(c-'0') + 52
	case c == '-':
		return 62
	case c == '_':
		return 63
	}
	return -1
}

// badHold reports whether a report's hold h is set and malformed.
func badHold(h string) bool { return h != "" && !validHold(h) }

// holdRefused is the error of a report call (op) not made because the
// hold of an outcome (what names it) is malformed.
func holdRefused(op, what string) error {
	return &Error{Op: op, Err: fmt.Errorf("%w: %s: %w", ErrInvalid, what, errBadHold)}
}
