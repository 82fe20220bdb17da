package yamlkeys

import (
	"encoding"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// fields are the keys of a struct as the YAML decoder reads them.
type fields struct {
	types map[string]reflect.Type // a key's field type
	// anyKey: the struct has an ",inline" map, which takes every other key.
	anyKey bool
}

// Keys returns the keys a mapping decoded into t may have, sorted: the
// yaml tags of its exported fields (or their names in lower case), those
// of ",inline" structs included, as the decoder reads them. A pointer is
// its element; any type other than a struct has none. The keys an
// ",inline" map takes are not listed.
func Keys(t reflect.Type) []string {
	f := fieldsOf(t)
	keys := make([]string, 0, len(f.types))
	for k := range f.types {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// fieldsOf returns the fields of t, following the decoder's rules for
// yaml tags (see go.yaml.in/yaml/v3 getStructInfo).
func fieldsOf(t reflect.Type) fields {
	f := fields{types: map[string]reflect.Type{}}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return f
	}
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() && !sf.Anonymous {
			continue
		}
		tag := sf.Tag.Get("yaml")
		if tag == "" && !strings.Contains(string(sf.Tag), ":") {
			tag = string(sf.Tag)
		}
		if tag == "-" {
			continue
		}
		name, flags, _ := strings.Cut(tag, ",")
		if slices.Contains(strings.Split(flags, ","), "inline") {
			ft := sf.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			switch {
			case ft.Kind() == reflect.Map:
				f.anyKey = true
			case ft.Kind() == reflect.Struct && !opaque(ft, nil):
				in := fieldsOf(ft)
				for k, v := range in.types {
					f.types[k] = v
				}
				f.anyKey = f.anyKey || in.anyKey
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(sf.Name)
		}
		f.types[name] = sf.Type
	}
	return f
}

// obsoleteUnmarshaler is the function form of yaml.Unmarshaler, which the
// decoder still calls.
type obsoleteUnmarshaler interface {
	UnmarshalYAML(unmarshal func(any) error) error
}

var (
	nodeType            = reflect.TypeFor[yaml.Node]()
	unmarshalerType     = reflect.TypeFor[yaml.Unmarshaler]()
	obsoleteType        = reflect.TypeFor[obsoleteUnmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// opaque reports whether values of t decode by methods of their own (or
// are kept as YAML nodes), so that their content is not checked here:
// what they accept is theirs to say. Types of through are not opaque.
func opaque(t reflect.Type, through []reflect.Type) bool {
	if slices.Contains(through, t) {
		return false
	}
	p := reflect.PointerTo(t)
	return t == nodeType || p.Implements(unmarshalerType) || p.Implements(obsoleteType) || p.Implements(textUnmarshalerType)
}

// visit is a node of the document and the type it decodes into.
type visit struct {
	n     *yaml.Node
	t     reflect.Type
	label string // what the node is written as: its key, key[i] for an item
	used  bool   // a decoder message was already explained by it
}

// walker goes over a document as the decoder would decode it into a type.
type walker struct {
	through  []reflect.Type
	labelled []reflect.Type
	seen     map[visitKey]bool
	visits   []*visit
	unknown  map[lineKey]Unknown
}

type visitKey struct {
	n *yaml.Node
	t reflect.Type
}

type lineKey struct {
	line int
	key  string
}

// maxVisits bounds the work on a document of many aliases: each node is
// visited once per type anyway.
const maxVisits = 1 << 20

func (w *walker) walk(n *yaml.Node, t reflect.Type, label string) {
	for n != nil && (n.Kind == yaml.AliasNode || n.Kind == yaml.DocumentNode) {
		if n.Kind == yaml.AliasNode {
			n = n.Alias
		} else if len(n.Content) == 1 {
			n = n.Content[0]
		} else {
			return
		}
	}
	if n == nil || t == nil || len(w.visits) >= maxVisits || w.seen[visitKey{n, t}] {
		return
	}
	w.seen[visitKey{n, t}] = true
	w.visits = append(w.visits, &visit{n: n, t: t, label: label})
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if opaque(t, w.through) {
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind == yaml.MappingNode {
			w.mapping(n, t, fieldsOf(t))
		}
	case reflect.Slice, reflect.Array:
		if n.Kind == yaml.SequenceNode {
			for i, c := range n.Content {
				w.walk(c, t.Elem(), fmt.Sprintf("%s[%d]", label, i))
			}
		}
	case reflect.Map:
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				if k := n.Content[i]; isMerge(k) {
					w.merged(n.Content[i+1], t)
				} else {
					w.walk(n.Content[i+1], t.Elem(), Shown(k.Value))
				}
			}
		}
	}
}

// mapping checks the keys of mapping n, which decodes into struct t of
// fields f, and walks their values.
func (w *walker) mapping(n *yaml.Node, t reflect.Type, f fields) {
	var keys []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if isMerge(k) {
			w.merged(v, t)
			continue
		}
		if k.Kind != yaml.ScalarNode {
			continue
		}
		ft, ok := f.types[k.Value]
		if !ok {
			if !f.anyKey {
				if keys == nil {
					keys = Keys(t)
				}
				w.unknown[lineKey{k.Line, k.Value}] = Unknown{Line: k.Line, Key: k.Value, Valid: keys}
			}
			continue
		}
		w.walk(v, ft, k.Value)
	}
}

// merged walks the mappings a merge key ("<<") brings into a mapping
// decoded into t.
func (w *walker) merged(v *yaml.Node, t reflect.Type) {
	for v != nil && v.Kind == yaml.AliasNode {
		v = v.Alias
	}
	if v == nil {
		return
	}
	if v.Kind == yaml.SequenceNode {
		for _, c := range v.Content {
			w.walk(c, t, "")
		}
		return
	}
	w.walk(v, t, "")
}

func isMerge(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.Value == "<<" && (k.Tag == "" || k.Tag == "!" || k.ShortTag() == "!!merge")
}
