package rlsconfig

import (
	"errors"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/yamlkeys"
)

// Error is one problem of a configuration file, named as its reader looks
// for it: the file, the domain, the descriptor path (key_value per level,
// joined by '.', as envoyproxy/ratelimit names descriptors) and the field.
// Load joins every problem of every file.
type Error struct {
	File   string
	Domain string // empty when the file has no usable domain
	Path   string // empty for a problem of the file or its domain
	Field  string // e.g. "rate_limit", "rate_limit.replaces[0].name"; may be empty
	Reason string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Domain != "" {
		b.WriteString(": domain ")
		b.WriteString(e.Domain)
	}
	if e.Path != "" {
		b.WriteString(": descriptor ")
		b.WriteString(e.Path)
	}
	if e.Field != "" {
		b.WriteString(": ")
		b.WriteString(e.Field)
	}
	b.WriteString(": ")
	b.WriteString(e.Reason)
	return b.String()
}

// Errors returns the Errors inside err (joined or wrapped).
func Errors(err error) []*Error {
	var out []*Error
	var walk func(error)
	walk = func(err error) {
		var e *Error
		switch u := err.(type) {
		case nil:
		case interface{ Unwrap() []error }:
			for _, c := range u.Unwrap() {
				walk(c)
			}
		default:
			if errors.As(err, &e) {
				out = append(out, e)
			}
		}
	}
	walk(err)
	return out
}

// yamlLine finds the line a YAML decoding message starts with.
var yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): `)

// fileSchema explains the decoder's errors in the file's terms (yamlkeys):
// an unknown key of the rules-file types under rate_limit with the key it
// likely misspells, a value of the wrong form with its key and the form
// wanted. The keys of this package's own mappings are checked by others.
var fileSchema = yamlkeys.Schema{Type: reflect.TypeFor[fileYAML](),
	Labelled: []reflect.Type{reflect.TypeFor[rules.Duration](), reflect.TypeFor[rules.Timestamp]()}}

// decodeErrors turns a YAML decoding error into Errors naming the
// descriptor written at each message's line (the innermost one).
func decodeErrors(file string, data []byte, err error) []error {
	doc := outline(data)
	err = fileSchema.Explain(data, err)
	msgs := []string{err.Error()}
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	out := make([]error, 0, len(msgs))
	for _, msg := range msgs {
		e := &Error{File: file, Domain: doc.domain, Reason: msg}
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			line, _ := strconv.Atoi(m[1])
			e.Path = doc.pathAt(line)
		}
		out = append(out, e)
	}
	return out
}

// docOutline is where a file's descriptors are written.
type docOutline struct {
	domain string
	spans  []span
}

// span is the lines (inclusive) of one descriptor and its path.
type span struct {
	first, last int
	path        string
}

// outline maps the descriptors of data to the lines they are written on.
// It is best effort: a part that is not of the expected shape is left out.
func outline(data []byte) docOutline {
	var doc yaml.Node
	var o docOutline
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return o
	}
	root := doc.Content[0]
	if d := mapValue(root, "domain"); d != nil && d.Kind == yaml.ScalarNode && validDomain(d.Value) == "" {
		o.domain = d.Value
	}
	var walk func(list *yaml.Node, prefix string)
	walk = func(list *yaml.Node, prefix string) {
		if list == nil || list.Kind != yaml.SequenceNode {
			return
		}
		for _, item := range list.Content {
			k := mapValue(item, "key")
			if k == nil || k.Kind != yaml.ScalarNode {
				continue
			}
			p := k.Value
			if v := mapValue(item, "value"); v != nil && v.Kind == yaml.ScalarNode && v.Value != "" {
				p += "_" + v.Value
			}
			if prefix != "" {
				p = prefix + "." + p
			}
			// Cut at each level: a path built whole would be rebuilt at
			// every level of a deep nesting, quadratic in the file.
			p = truncate(p, maxShownPath)
			o.spans = append(o.spans, span{first: item.Line, last: lastLine(item), path: showPath(p)})
			walk(mapValue(item, "descriptors"), p)
		}
	}
	walk(mapValue(root, "descriptors"), "")
	return o
}

// pathAt returns the path of the innermost descriptor written at line, or
// "".
func (o docOutline) pathAt(line int) string {
	path, width := "", -1
	for _, s := range o.spans {
		if s.first <= line && line <= s.last && (width < 0 || s.last-s.first <= width) {
			path, width = s.path, s.last-s.first
		}
	}
	return path
}

// mapValue returns the value of key in mapping n, or nil.
func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// lastLine returns the last line of n's subtree. Aliases are not followed:
// their target is written elsewhere.
func lastLine(n *yaml.Node) int {
	last := n.Line
	for _, c := range n.Content {
		last = max(last, lastLine(c))
	}
	return last
}
