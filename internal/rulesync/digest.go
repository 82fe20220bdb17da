package rulesync

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"

	"github.com/ratewarden/ratewarden/internal/rules"
)

// digestOf is the SHA-256 of what compiling f puts in force: its rules in
// id order, then the rest of the file, as JSON (the form the admin API
// stores a rule in). Compile orders the rules by priority and id, so the
// order they come in changes nothing, and neither does a comment or the
// layout of a file: two files, RLS configs or dynamic versions that make
// the same rules have the same digest. The rules are encoded one by one, so
// the digest of a large set needs no more memory than its largest rule.
func digestOf(f *rules.File) string {
	byID := make([]*rules.Rule, len(f.Rules))
	for i := range f.Rules {
		byID[i] = &f.Rules[i]
	}
	slices.SortFunc(byID, func(a, b *rules.Rule) int { return cmp.Compare(a.ID, b.ID) })
	h := sha256.New()
	enc := json.NewEncoder(h)
	for _, r := range byID {
		_ = enc.Encode(r) // plain data into a hash: never fails
	}
	rest := *f
	rest.Rules = nil
	_ = enc.Encode(&rest)
	return hex.EncodeToString(h.Sum(nil))
}
