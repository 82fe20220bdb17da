package rules

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strings"

	"github.com/ratewarden/ratewarden/internal/decide"
)

// Key layout. Every key of a rule and subject is
//
//	<prefix>{<rule id>|<subject>}<suffix>
//
// with suffix ":fw", ":sw2", ":swc" or ":tb" for the state (by algorithm, so
// changing a rule's algorithm starts from fresh state), ":hold" and ":hits".
// A state whose layout changes gets a new suffix, so limiters of two
// versions, during a rolling upgrade, never read each other's state:
// sliding_window's went from ":sw" (one member per unit) to ":sw2" (running
// totals, see lua/sliding_window.lua); keys under the old suffix expire
// within their largest window.
// The hash tag {<rule id>|<subject>} is the same for all three, so a script
// touching them stays on one Redis Cluster slot. The subject is "name=value" per key
// dimension, in key order, joined by '|'; each value is escaped (see
// escapeByte) so it can contain no '{', '}', '|' or '=': the hash tag always
// ends at our '}' and distinct values give distinct subjects. A subject
// longer than maxSubject bytes escaped is replaced by "#" and 32 hex digits
// of SHA-256 over a length-prefixed encoding of the names and values; an
// escaped subject starts with a dimension name, never '#', so the two forms
// cannot collide. The ip dimension's value of an IPv6 client is its prefix
// ("ip=2001:db8:1:2::/64", see IPSubject), so the addresses of one prefix
// share the keys.
const (
	maxSubject  = 96
	maxKeyDims  = 8
	hashedLen   = 1 + 32
	holdSuffix  = ":hold"
	hitsSuffix  = ":hits"
	maxPrefix   = 64
	attrDimHead = "attr:"
)

// stateSuffix returns the state key suffix of an algorithm.
func stateSuffix(a decide.Algorithm) string {
	switch a {
	case decide.FixedWindow:
		return ":fw"
	case decide.SlidingWindow:
		return ":sw2"
	case decide.SlidingWindowCounter:
		return ":swc"
	case decide.TokenBucket:
		return ":tb"
	case decide.Concurrency:
		return ":cc"
	}
	return ":" + string(a)
}

type dimKind uint8

const (
	dimIP dimKind = iota
	dimUserID
	dimEndpoint
	dimMethod
	dimTier
	dimAttr
)

// dimension is one compiled key dimension.
type dimension struct {
	kind dimKind
	name string // as written: "ip", "attr:app_key"
	attr string // attribute name for dimAttr
}

func parseDimension(s string) (dimension, error) {
	switch s {
	case "ip":
		return dimension{kind: dimIP, name: s}, nil
	case "user_id":
		return dimension{kind: dimUserID, name: s}, nil
	case "endpoint":
		return dimension{kind: dimEndpoint, name: s}, nil
	case "method":
		return dimension{kind: dimMethod, name: s}, nil
	case "tier":
		return dimension{kind: dimTier, name: s}, nil
	}
	if name, ok := strings.CutPrefix(s, attrDimHead); ok {
		if !validAttrName(name) {
			return dimension{}, errors.New("attribute name must match [A-Za-z0-9_-]{1,64}")
		}
		return dimension{kind: dimAttr, name: s, attr: name}, nil
	}
	return dimension{}, errors.New("unknown dimension (want ip, user_id, endpoint, method, tier or attr:<name>)")
}

func validAttrName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(isAlnum(c) || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// value returns the request's value for d. Method and tier are upper-cased
// since they match case-insensitively. For ip and user_id it is the value
// as sent; keys use compiled.ipValue instead, which groups IPv6 clients by
// prefix, and Set.UserKey.
func (d dimension) value(r *Request) string {
	switch d.kind {
	case dimIP:
		return r.IP
	case dimUserID:
		return r.UserID
	case dimEndpoint:
		return r.Endpoint
	case dimMethod:
		return strings.ToUpper(r.Method)
	case dimTier:
		return strings.ToUpper(r.Tier)
	}
	return r.Attributes[d.attr]
}

func escapeByte(c byte) bool {
	switch c {
	case '%', '{', '}', '|', '#', '=':
		return true
	}
	return c <= 0x20 || c >= 0x7f
}

func escapedLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if escapeByte(s[i]) {
			n += 2
		}
	}
	return n
}

const upperHex = "0123456789ABCDEF"

func writeEscaped(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if escapeByte(c) {
			b.WriteByte('%')
			b.WriteByte(upperHex[c>>4])
			b.WriteByte(upperHex[c&15])
			continue
		}
		b.WriteByte(c)
	}
}

// buildKeys returns the keys for head ("<prefix>{<rule id>|"), the state
// suffix, and the dimension values. The three keys are slices of one string:
// one allocation unless the subject is hashed.
func buildKeys(head, suffix string, names, vals []string) decide.Keys {
	subjLen := len(names) - 1
	for i, n := range names {
		subjLen += escapedLen(n) + 1 + escapedLen(vals[i])
	}
	var digest [sha256.Size]byte
	hashed := subjLen > maxSubject
	if hashed {
		digest = hashSubject(names, vals)
		subjLen = hashedLen
	}
	tagEnd := len(head) + subjLen + 1
	var b strings.Builder
	b.Grow(3*tagEnd + len(suffix) + len(holdSuffix) + len(hitsSuffix))
	b.WriteString(head)
	if hashed {
		var hx [32]byte
		hex.Encode(hx[:], digest[:16])
		b.WriteByte('#')
		b.Write(hx[:])
	} else {
		for i, n := range names {
			if i > 0 {
				b.WriteByte('|')
			}
			writeEscaped(&b, n) // the names of key dimensions need no escape; descriptor keys may
			b.WriteByte('=')
			writeEscaped(&b, vals[i])
		}
	}
	b.WriteByte('}')
	tag := b.String() // shares the builder's buffer, which was grown to fit
	b.WriteString(suffix)
	b.WriteString(tag)
	b.WriteString(holdSuffix)
	b.WriteString(tag)
	b.WriteString(hitsSuffix)
	all := b.String()
	s1 := tagEnd + len(suffix)
	s2 := s1 + tagEnd + len(holdSuffix)
	return decide.Keys{State: all[:s1], Hold: all[s1:s2], Hits: all[s2:]}
}

// hashSubject is SHA-256 over, per dimension (or descriptor level), uvarint(len(name)) name
// uvarint(len(value)) value: an injective encoding of the subject.
func hashSubject(names, vals []string) [sha256.Size]byte {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	for i, name := range names {
		h.Write(binary.AppendUvarint(n[:0], uint64(len(name))))
		h.Write([]byte(name))
		h.Write(binary.AppendUvarint(n[:0], uint64(len(vals[i]))))
		h.Write([]byte(vals[i]))
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// validatePrefix checks a key prefix: it must not contain a hash tag brace
// (the rule's tag must be the first), nor spaces or control bytes.
func validatePrefix(p string) error {
	if len(p) > maxPrefix {
		return errors.New("must be at most 64 bytes")
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '{' || c == '}' {
			return errors.New("must not contain { or }")
		}
		if c <= 0x20 || c >= 0x7f {
			return errors.New("must be printable ASCII without spaces")
		}
	}
	return nil
}
