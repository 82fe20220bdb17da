package jsonwire

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestSkipAndBool(t *testing.T) {
	for _, in := range []string{`1`, `-0.5e+3`, `"a\"b"`, `true`, `false`, `null`, `[]`, `{}`, `[1,{"a":[true,null]},"x"]`, `{"a":{"b":{"c":[]}}}`} {
		p := New([]byte(in + ` 7`))
		if err := p.Skip(); err != nil {
			t.Fatalf("Skip(%s): %v", in, err)
		}
		p.Space()
		if n, err := p.Integer(); err != nil || n != 7 {
			t.Fatalf("after Skip(%s): %d, %v", in, n, err)
		}
	}
	for _, in := range []string{``, `tru`, `-`, `1.`, `1e`, `[1,`, `{"a"}`, strings.Repeat("[", 100) + strings.Repeat("]", 100)} {
		p := New([]byte(in))
		if err := p.Skip(); err == nil && p.End() == nil {
			t.Errorf("Skip(%q) accepted", in)
		}
	}
	p := New([]byte(`true`))
	if b, err := p.Bool(); err != nil || !b {
		t.Fatal("Bool(true)")
	}
}

// Whatever Skip accepts as a whole value, encoding/json accepts.
func FuzzSkip(f *testing.F) {
	f.Add([]byte(`{"a":[1,2.5e-3,"x",null,true]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := New(data)
		if p.AtEnd() {
			return
		}
		if p.Skip() == nil && p.End() == nil && !json.Valid(data) {
			t.Fatalf("Skip accepted %q, which is not JSON", data)
		}
	})
}
