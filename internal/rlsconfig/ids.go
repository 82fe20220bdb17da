package rlsconfig

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"

	"github.com/ratewarden/ratewarden/internal/rules"
)

// Rule ids. A rule of a configuration directory is named by its domain and
// path, so that its id (which its Redis keys carry) stays the same however
// the files are named, ordered or edited elsewhere:
//
//	rls.<domain>.<path>
//
// with the path as Path writes it (key_value.key2) and every byte other
// than A-Z, a-z, 0-9, '.', '_' and '-' written '_' (a multi-byte character
// as one '_'). That readable id is used when it is at most 64 bytes (the
// bound of rule ids) and no other rule of the directory maps to the same
// one. Otherwise the id is the readable one cut to 51 bytes, then '-' and
// 12 hex digits of the SHA-256 of the domain and the entries' keys and
// values (length-prefixed): unique however the names map. When two paths
// collide, both take the hashed form, so an id never depends on which of
// them comes first.
const (
	idPrefix  = "rls."
	maxID     = 64
	idHashLen = 12
)

// assignIDs gives every node its rule id.
func assignIDs(nodes []*node) {
	readable := make([]string, len(nodes))
	count := make(map[string]int, len(nodes))
	for i, n := range nodes {
		readable[i] = readableID(n.rule.Descriptor)
		count[readable[i]]++
	}
	var buf []byte
	for i, n := range nodes {
		id := readable[i]
		if len(id) > maxID || count[id] > 1 {
			id = hashedID(id, n.rule.Descriptor, &buf)
		}
		n.rule.ID = id
	}
}

// readableID is rls.<domain>.<path>, mapped to the characters of rule ids.
// It is written up to one byte past maxID: a longer one is hashed anyway,
// from its first bytes, so a long path costs no more than a short one.
func readableID(d *rules.DescriptorMatch) string {
	var b strings.Builder
	b.WriteString(idPrefix)
	writeMapped(&b, d.Domain)
	for _, e := range d.Entries {
		writeMapped(&b, ".")
		writeMapped(&b, e.Key)
		if e.Value != "" {
			writeMapped(&b, "_")
			writeMapped(&b, e.Value)
		}
	}
	return b.String()
}

// writeMapped writes s with every rune that rule ids do not allow as '_',
// up to maxID+1 bytes in b.
func writeMapped(b *strings.Builder, s string) {
	for _, c := range s {
		if b.Len() > maxID {
			return
		}
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-' {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
}

// hashedID is the readable id cut short, '-' and the hash of the path.
// buf is scratch space, reused across calls.
func hashedID(readable string, d *rules.DescriptorMatch, buf *[]byte) string {
	b := (*buf)[:0]
	write := func(s string) {
		b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
		b = append(b, s...)
	}
	write(d.Domain)
	for _, e := range d.Entries {
		write(e.Key)
		write(e.Value)
	}
	*buf = b
	sum := sha256.Sum256(b)
	head := readable[:min(len(readable), maxID-1-idHashLen)]
	return head + "-" + hex.EncodeToString(sum[:])[:idHashLen]
}
