package jsonwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// walk reads the document p holds into the values encoding/json would
// give, with integers as int64: what a caller walking the parser sees.
func walk(p *Parser) (any, error) {
	var value func() (any, error)
	value = func() (any, error) {
		switch p.Peek() {
		case '{':
			m := map[string]any{}
			err := p.Object(func(name string) error {
				v, err := value()
				m[name] = v
				return err
			})
			return m, err
		case '[':
			a := []any{}
			err := p.Array(func(int) error {
				v, err := value()
				a = append(a, v)
				return err
			})
			return a, err
		case '"':
			return p.Str()
		case 'n':
			if p.Null() {
				return nil, nil
			}
			return nil, errors.New("not null")
		default:
			return p.Integer()
		}
	}
	p.Space()
	v, err := value()
	if err != nil {
		return nil, err
	}
	return v, p.End()
}

// reference decodes data with encoding/json; ok is false when it refuses
// it or when it holds what the parser does not read (booleans, fractions,
// integers beyond int64, invalid UTF-8, which encoding/json replaces and
// the parser refuses), so that the two are comparable.
func reference(data []byte) (v any, ok bool) {
	if !utf8.Valid(data) {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	// Anything but whitespace after the document makes it another one.
	if dec.Decode(&v) != nil || dec.InputOffset() != int64(len(bytes.TrimRight(data, " \t\r\n"))) {
		return nil, false
	}
	return integers(v)
}

// integers turns v's json.Numbers into int64; ok is false for a boolean or
// a number that is no int64.
func integers(v any) (any, bool) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			var ok bool
			if v[k], ok = integers(e); !ok {
				return nil, false
			}
		}
	case []any:
		for i, e := range v {
			var ok bool
			if v[i], ok = integers(e); !ok {
				return nil, false
			}
		}
	case json.Number:
		n, err := strconv.ParseInt(string(v), 10, 64)
		return n, err == nil
	case bool:
		return nil, false
	}
	return v, true
}

func TestParserAgreesWithEncodingJSON(t *testing.T) {
	accepted := []string{
		`{}`, `[]`, ` { "a" : 1 , "b" : [ -2 , "x" , null ] } `, `{"a":{"b":{"c":[]}}}`,
		`{"ip":"203.0.113.7","cost":9223372036854775807}`, `-9223372036854775808`, `0`, `"\u00e9\n\t\"\\\/"`,
		`"\ud83d\ude00"`, `"\ud83d"`, `"\ud83dx"`, `"\ude00\ud83d"`, `{"a":1,"a":2}`, `"é"`, "\"\u2028\"",
	}
	refused := []string{
		``, `{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `[1,]`, `[1 2]`, `{"a":1}x`, `{"a":1}{}`, `{a:1}`, `'a'`,
		`01`, `-`, `1.5`, `1e3`, `9223372036854775808`, `"a`, "\"\x01\"", `"\x"`, `"\u12"`, `"\u12G4"`,
		"\"\xff\"", `nul`, `true`, `{"a":true}`, `[null,`,
	}
	for _, doc := range accepted {
		p := New([]byte(doc))
		got, err := walk(&p)
		want, ok := reference([]byte(doc))
		if err != nil || !ok {
			t.Errorf("%s: parser error %v, encoding/json comparable %v; want both to accept", doc, err, ok)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: parser read %#v, encoding/json %#v", doc, got, want)
		}
	}
	for _, doc := range refused {
		p := New([]byte(doc))
		if v, err := walk(&p); err == nil {
			t.Errorf("%s: parser accepted it as %#v", doc, v)
		}
	}
}

func TestParserErrorsSayWhere(t *testing.T) {
	p := New([]byte(`{"a": [1, 2 3]}`))
	_, err := walk(&p)
	if err == nil || !strings.Contains(err.Error(), "offset 12") || !strings.Contains(err.Error(), "expected ',' or ']'") {
		t.Fatalf("error %v, want the offset of the 3 and what was expected", err)
	}
	p = New([]byte(`{"a":1} x`))
	if _, err := walk(&p); !errors.Is(err, ErrTrailing) {
		t.Fatalf("error %v, want ErrTrailing", err)
	}
}

// TestPlainStringsShareTheDocument holds Str to its promise: a string
// without escapes is a substring of the document, no allocation.
func TestPlainStringsShareTheDocument(t *testing.T) {
	data := []byte(`{"ip":"203.0.113.7","endpoint":"/api/books/17","method":"GET"}`)
	p := New(data)
	allocs := testing.AllocsPerRun(100, func() {
		q := p
		_ = q.Object(func(string) error { _, err := q.Str(); return err })
	})
	if allocs != 0 {
		t.Fatalf("%v allocations walking plain strings, want 0", allocs)
	}
}

// FuzzParser holds the parser to encoding/json: whatever it accepts,
// encoding/json accepts with the same values, and it accepts whatever
// encoding/json accepts that holds only what it reads.
func FuzzParser(f *testing.F) {
	for _, seed := range []string{`{"a":[1,"b",null]}`, `"\ud83d\ude00"`, `{"checks":[{"ip":"1.2.3.4"}]}`, `[-0]`, `{"a":1.5}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p := New(data)
		got, err := walk(&p)
		want, ok := reference(data)
		switch {
		case err == nil && !ok:
			t.Fatalf("%q: parser accepted %#v, encoding/json refused it or holds more", data, got)
		case err != nil && ok:
			t.Fatalf("%q: parser refused it (%v), encoding/json read %#v", data, err, want)
		case err == nil && !reflect.DeepEqual(got, want):
			t.Fatalf("%q: parser read %#v, encoding/json %#v", data, got, want)
		}
	})
}
