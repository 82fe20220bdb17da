package yamlkeys

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// maxListed is how many valid keys an unknown key's message lists when it
// has no suggestion; a mapping of more keys lists none.
const maxListed = 10

// maxShown bounds the part of a key or a value that a message shows.
const maxShown = 40

// maxExplained bounds the messages Explain returns: a file of thousands of
// wrong values would make an error of megabytes, printed and logged, and
// each message explained costs a look over the document. The rest are
// counted in one message.
const maxExplained = 50

// Unknown is a key written in a mapping that does not have it.
type Unknown struct {
	Line int    // where the key is written; 0: not said
	In   string // the mapping, e.g. "lease"; empty: not said
	Key  string
	// Valid are the mapping's keys, from which the suggestion is drawn.
	Valid []string
	// Hint, when set, replaces the suggestion and the list of valid keys,
	// e.g. "read under rate_limit".
	Hint string
}

// String is the message: `line 7: unknown key "algoritm" (did you mean
// "algorithm"?)`; without a suggestion, the valid keys when they are few.
func (u Unknown) String() string {
	var b strings.Builder
	if u.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", u.Line)
	}
	if u.In != "" {
		b.WriteString(u.In + ": ")
	}
	fmt.Fprintf(&b, "unknown key %q", shorten(u.Key))
	switch s := Suggest(u.Key, u.Valid); {
	case u.Hint != "":
		fmt.Fprintf(&b, " (%s)", u.Hint)
	case s != "":
		fmt.Fprintf(&b, " (did you mean %q?)", s)
	case len(u.Valid) > 0 && len(u.Valid) <= maxListed:
		fmt.Fprintf(&b, " (valid keys: %s)", strings.Join(u.Valid, ", "))
	}
	return b.String()
}

// Schema is what a YAML document decodes into.
type Schema struct {
	// Type is the type the document decodes into.
	Type reflect.Type
	// Through are types with an UnmarshalYAML method that decode a mapping
	// into fields of their own yaml tags (as a "type plain T" does), so
	// that their keys are checked. The content of any other type with an
	// UnmarshalYAML or UnmarshalText method is left to it.
	Through []reflect.Type
	// Labelled are types with an UnmarshalYAML method whose errors start
	// with "line N: " and quote the value written (%q) but not its key
	// (`line 5: invalid duration "1x" ...`): Explain adds the key.
	Labelled []reflect.Type
}

// Unknown returns the keys of the document data that the mappings they
// are written in do not have, in the order of the document, with their
// lines and their mappings' keys; nil when data does not parse. A
// document of JSON is one of YAML: its unknown keys are found alike, as
// long as the json names of s.Type's fields are their yaml names.
func (s Schema) Unknown(data []byte) []Unknown {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil {
		return nil
	}
	w := s.walk(&doc)
	out := make([]Unknown, 0, len(w.unknown))
	for _, u := range w.unknown {
		out = append(out, u)
	}
	slices.SortFunc(out, func(a, b Unknown) int {
		if a.Line != b.Line {
			return a.Line - b.Line
		}
		return strings.Compare(a.Key, b.Key)
	})
	return out
}

// walk goes over doc as it decodes into s.Type.
func (s Schema) walk(doc *yaml.Node) *walker {
	w := &walker{through: s.Through, labelled: s.Labelled, seen: map[visitKey]bool{}, unknown: map[lineKey]Unknown{}}
	w.walk(doc, s.Type, "")
	return w
}

// The decoder's messages that name Go types. A key or value shown may
// hold line breaks.
var (
	notFoundRE = regexp.MustCompile(`(?s)^line (\d+): field (.*) not found in type \S+$`)
	setTwiceRE = regexp.MustCompile(`(?s)^line (\d+): field (.*) already set in type \S+$`)
	cannotRE   = regexp.MustCompile("(?s)^line (\\d+): cannot unmarshal (.+?)(?: `(.*)`)? into (.+)$")
)

// Explain returns err, an error of a strict decoder (KnownFields) of data
// into s.Type, with its messages in the writer's terms: an unknown key
// with the key it likely misspells (or the valid ones), a value of the
// wrong form with the key it is written under and the form wanted, an
// error of a Labelled type with its key. A
// *yaml.TypeError stays one, its messages in their order, each still
// starting with "line N: "; a message Explain does not know stays as it
// is, and any other error is returned as it is, unless its message holds
// a character that is not printable (a value the decoder shows as
// written): then as its message with those escaped. Past maxExplained
// messages, the rest are counted in one ("line N: and 7 more errors"). A
// key or value of the document that a message shows is shortened, and
// quoted when it holds a character that is not printable.
func (s Schema) Explain(data []byte, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		if msg := err.Error(); !printable(msg) {
			return errors.New(escape(msg))
		}
		return err
	}
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil {
		return err
	}
	w := s.walk(&doc)
	n := min(len(te.Errors), maxExplained)
	msgs := make([]string, n, n+1)
	for i, msg := range te.Errors[:n] {
		msgs[i] = w.explain(msg)
	}
	if rest := te.Errors[n:]; len(rest) > 0 {
		msgs = append(msgs, lineRE.FindString(rest[0])+fmt.Sprintf("and %d more errors", len(rest)))
	}
	return &yaml.TypeError{Errors: msgs}
}

// explain rewrites one decoder message.
func (w *walker) explain(msg string) string {
	if m := notFoundRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		if u, ok := w.unknown[lineKey{line, m[2]}]; ok {
			return u.String()
		}
		return Unknown{Line: line, Key: m[2]}.String()
	}
	if m := setTwiceRE.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("line %s: key %q is set twice", m[1], shorten(m[2]))
	}
	m := cannotRE.FindStringSubmatch(msg)
	if m == nil {
		return w.label(msg)
	}
	line, _ := strconv.Atoi(m[1])
	v := w.find(line, m[2], m[3], m[4])
	if v == nil || describe(v.t) == "" {
		// Not a node of the walk (a document the parser reads otherwise
		// than the decoder): the type is named by its shape at most.
		got := shown(m[2], m[3])
		if want := describeName(m[4]); want != "" {
			return fmt.Sprintf("line %d: want %s, got %s", line, want, got)
		}
		return fmt.Sprintf("line %d: %s cannot be read here", line, got)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "line %d: ", line)
	if v.label != "" {
		b.WriteString(v.label + ": ")
	}
	fmt.Fprintf(&b, "want %s, got %s", describe(v.t), written(v.n))
	return b.String()
}

// shown is what the decoder shows as tag and value, in the writer's terms.
func shown(tag, value string) string {
	switch {
	case tag == "!!map":
		return "a mapping"
	case tag == "!!seq":
		return "a list"
	case tag == "!!str":
		return strconv.Quote(value)
	case strings.HasPrefix(tag, "!!"):
		return Shown(value)
	}
	return fmt.Sprintf("a value tagged %q", shorten(tag))
}

// describeName is the form of a value of the Go type named name, when its
// name tells it, or "".
func describeName(name string) string {
	switch {
	case strings.HasPrefix(name, "[]"):
		return "a list"
	case strings.HasPrefix(name, "map["):
		return "a mapping"
	}
	for _, t := range []reflect.Type{reflect.TypeFor[bool](), reflect.TypeFor[string](), reflect.TypeFor[int](),
		reflect.TypeFor[int64](), reflect.TypeFor[int32](), reflect.TypeFor[uint32](), reflect.TypeFor[uint64](),
		reflect.TypeFor[float64](), reflect.TypeFor[time.Duration]()} {
		if t.String() == name {
			return describe(t)
		}
	}
	return ""
}

// lineRE is the line a message starts with.
var lineRE = regexp.MustCompile(`^line (\d+): `)

// label adds to msg, an error of a Labelled type, the key of the value it
// is about: the one node of such a type written at its line whose value
// it quotes. Other messages are returned as they are.
func (w *walker) label(msg string) string {
	m := lineRE.FindStringSubmatchIndex(msg)
	if m == nil || len(w.labelled) == 0 {
		return msg
	}
	line, _ := strconv.Atoi(msg[m[2]:m[3]])
	found := ""
	for _, v := range w.visits {
		t := v.t
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if v.n.Line != line || v.n.Kind != yaml.ScalarNode || v.label == "" || !slices.Contains(w.labelled, t) ||
			!strings.Contains(msg[m[1]:], strconv.Quote(v.n.Value)) {
			continue
		}
		if found != "" && found != v.label {
			return msg // two such values: which one is not told
		}
		found = v.label
	}
	if found == "" {
		return msg
	}
	return msg[:m[1]] + found + ": " + msg[m[1]:]
}

// find returns the visited node a "cannot unmarshal" message is about:
// written at line, of tag and (for a scalar) value, as the decoder shows
// them, decoded into a type named typ if one is. Among equals, the first
// not yet used is taken: the decoder reports in the order of the document.
func (w *walker) find(line int, tag, value, typ string) *visit {
	var match, used *visit
	for _, v := range w.visits {
		if v.n.Line != line || !sameNode(v.n, tag, value) {
			continue
		}
		switch {
		case !v.used && v.t.String() == typ:
			v.used = true
			return v
		case !v.used && match == nil:
			match = v
		case used == nil:
			used = v
		}
	}
	if match != nil {
		match.used = true
		return match
	}
	return used
}

// sameNode reports whether n is the node the decoder shows as tag and
// value: the value whole, or its first 7 bytes and "..." when longer than 10.
func sameNode(n *yaml.Node, tag, value string) bool {
	switch tag {
	case "!!map":
		return n.Kind == yaml.MappingNode
	case "!!seq":
		return n.Kind == yaml.SequenceNode
	}
	if n.Kind != yaml.ScalarNode {
		return false
	}
	if len(n.Value) > 10 {
		return len(value) == 10 && strings.HasSuffix(value, "...") && strings.HasPrefix(n.Value, value[:7])
	}
	return n.Value == value
}

// written is how n is shown as what was found.
func written(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	if n.ShortTag() == "!!str" {
		return strconv.Quote(shorten(n.Value))
	}
	return Shown(n.Value)
}

// Shown is s, a key or value written by a user, as a message shows it:
// shortened to 40 bytes, and quoted when it holds a character that is not
// printable, so that the bytes of a file (a terminal's escape sequence, a
// line break) reach no terminal or log as they are.
func Shown(s string) string {
	s = shorten(s)
	if !printable(s) {
		return strconv.Quote(s)
	}
	return s
}

// printable reports whether s is UTF-8 of printable characters (and
// spaces) only.
func printable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return !strconv.IsPrint(r) })
}

// escape is s with each character that is not printable, and each byte
// that is no UTF-8, written as Go escapes it in a quoted string.
func escape(s string) string {
	var b strings.Builder
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && n == 1 {
			fmt.Fprintf(&b, `\x%02x`, s[0])
		} else if strconv.IsPrint(r) {
			b.WriteString(s[:n])
		} else {
			q := strconv.Quote(s[:n])
			b.WriteString(q[1 : len(q)-1])
		}
		s = s[n:]
	}
	return b.String()
}

// describe is the form of a value of t, in the writer's terms, or "".
func describe(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeFor[time.Duration]() {
		return "a duration (e.g. 1m, 30s)"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64:
		return "an integer"
	case reflect.Int8, reflect.Int16, reflect.Int32:
		bits := t.Bits()
		return fmt.Sprintf("an integer from %d to %d", -(int64(1) << (bits - 1)), int64(1)<<(bits-1)-1)
	case reflect.Uint, reflect.Uint64, reflect.Uintptr:
		return "an integer of at least 0"
	case reflect.Uint8, reflect.Uint16, reflect.Uint32:
		return fmt.Sprintf("an integer from 0 to %d", uint64(math.MaxUint64)>>(64-t.Bits()))
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping"
	}
	return ""
}

// shorten cuts s to maxShown bytes, never inside a character, and marks
// the cut.
func shorten(s string) string {
	if len(s) <= maxShown {
		return s
	}
	n := maxShown
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
