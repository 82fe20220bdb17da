package yamlkeys

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// The schema of the tests: a document of items, one type decoding through
// a "plain" copy of itself, one with an unmarshaler of its own, an inline
// struct and an inline map.
type testDoc struct {
	Items  []testItem         `yaml:"items"`
	Window time.Duration      `yaml:"window"`
	Tiers  map[string][]int64 `yaml:"tiers"`
	Extra  testExtra          `yaml:"extra"`
	Open   testOpen           `yaml:"open"`
}

type testItem struct {
	ID        string    `yaml:"id"`
	Algorithm string    `yaml:"algorithm"`
	Requests  int64     `yaml:"requests"`
	Small     uint32    `yaml:"small"`
	Shadow    bool      `yaml:"shadow"`
	Own       testOwn   `yaml:"own"`
	Keys      []string  `yaml:"key"`
	Nested    *testItem `yaml:"nested"`
	Wait      testWait  `yaml:"wait"`
	Pause     *testWait `yaml:"pause"`
}

// testWait reports its own errors, without its key, as rules.Duration does.
type testWait struct{}

func (w *testWait) UnmarshalYAML(n *yaml.Node) error {
	if n.Value == "ok" {
		return nil
	}
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: invalid wait %q", n.Line, n.Value)}}
}

// UnmarshalYAML decodes through a plain copy, as the rules file's Rule does.
func (i *testItem) UnmarshalYAML(unmarshal func(any) error) error {
	type plain testItem
	return unmarshal((*plain)(i))
}

// testOwn accepts anything, so its content is not checked.
type testOwn struct{}

func (o *testOwn) UnmarshalYAML(*yaml.Node) error { return nil }

type testCommon struct {
	From string `yaml:"from"`
	To   string `yaml:"to"`
}

type testExtra struct {
	testCommon `yaml:",inline"`
	TZ         string `yaml:"tz"`
}

type testOpen struct {
	Name  string               `yaml:"name"`
	Other map[string]yaml.Node `yaml:",inline"`
}

var testSchema = Schema{Type: reflect.TypeFor[testDoc](), Through: []reflect.Type{reflect.TypeFor[testItem]()},
	Labelled: []reflect.Type{reflect.TypeFor[testWait]()}}

// decodeStrict decodes data as the loaders do and explains the error.
func decodeStrict(t *testing.T, data string) []string {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader([]byte(data)))
	dec.KnownFields(true)
	var d testDoc
	err := dec.Decode(&d)
	if err == nil {
		return nil
	}
	err = testSchema.Explain([]byte(data), err)
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return []string{err.Error()}
	}
	return te.Errors
}

func TestExplain(t *testing.T) {
	tests := []struct {
		name, doc string
		want      []string
	}{
		{"a misspelt key of an item", "items:\n  - id: a\n    algoritm: x\n",
			[]string{`line 3: unknown key "algoritm" (did you mean "algorithm"?)`}},
		{"a misspelt top-level key", "itemz: []\n",
			[]string{`line 1: unknown key "itemz" (did you mean "items"?)`}},
		{"no suggestion, few keys listed", "extra: {colour: red}\n",
			[]string{`line 1: unknown key "colour" (valid keys: from, to, tz)`}},
		{"an inline struct's key", "extra: {form: x}\n",
			[]string{`line 1: unknown key "form" (did you mean "from"?)`}},
		{"a nested item", "items:\n  - id: a\n    nested:\n      requets: 1\n",
			[]string{`line 4: unknown key "requets" (did you mean "requests"?)`}},
		{"every problem, in order", "items:\n  - {id: a, shadw: true}\n  - id: b\n    requests: many\nwindw: 1m\n",
			[]string{
				`line 2: unknown key "shadw" (did you mean "shadow"?)`,
				`line 4: requests: want an integer, got "many"`,
				`line 5: unknown key "windw" (did you mean "window"?)`,
			}},
		{"a duration", "window: abc\n", []string{`line 1: window: want a duration (e.g. 1m, 30s), got "abc"`}},
		{"a boolean", "items: [{shadow: maybe}]\n", []string{`line 1: shadow: want true or false, got "maybe"`}},
		{"a negative unsigned", "items: [{small: -1}]\n", []string{`line 1: small: want an integer from 0 to 4294967295, got -1`}},
		{"a list for a scalar", "items: [{id: [a]}]\n", []string{`line 1: id: want a string, got a list`}},
		{"a scalar for a list", "items:\n  - key: ip\n", []string{`line 2: key: want a list, got "ip"`}},
		{"an item of a list", "items:\n  - key: [ip, {a: b}]\n", []string{`line 2: key[1]: want a string, got a mapping`}},
		{"a mapping for the list", "items: {id: a}\n", []string{`line 1: items: want a list, got a mapping`}},
		{"a scalar for an item", "items: [a]\n", []string{`line 1: items[0]: want a mapping, got "a"`}},
		{"a map's value", "tiers:\n  VIP: [1, x]\n", []string{`line 2: VIP[1]: want an integer, got "x"`}},
		{"a long value", "items: [{requests: abcdefghijkl}]\n", []string{`line 1: requests: want an integer, got "abcdefghijkl"`}},
		{"two values alike on one line", "items: [{requests: x}, {requests: x}]\n",
			[]string{`line 1: requests: want an integer, got "x"`, `line 1: requests: want an integer, got "x"`}},
		{"the document not a mapping", "- a\n", []string{`line 1: want a mapping, got a list`}},
		{"an own unmarshaler's error gets its key", "items: [{wait: x, pause: y}]\n",
			[]string{`line 1: wait: invalid wait "x"`, `line 1: pause: invalid wait "y"`}},
		{"which key is not told", "items: [{wait: x, pause: x}]\n",
			[]string{`line 1: invalid wait "x"`, `line 1: invalid wait "x"`}},
		{"an own unmarshaler's content is its own", "items: [{own: {anything: 1}}]\n", nil},
		{"an inline map takes every key", "open: {name: a, whatever: 1}\n", nil},
		{"a merged mapping", "base: &b {requets: 1}\nitems:\n  - <<: *b\n    id: a\n",
			[]string{`line 1: unknown key "base" (valid keys: extra, items, open, tiers, window)`, `line 1: unknown key "requets" (did you mean "requests"?)`}},
		{"an alias", "items:\n  - &a {id: a, shadw: true}\n  - *a\n",
			[]string{`line 2: unknown key "shadw" (did you mean "shadow"?)`, `line 2: unknown key "shadw" (did you mean "shadow"?)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := decodeStrict(t, tt.doc)
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
		})
	}
}

// Errors other than type errors, and documents that do not parse, are
// returned as they are.
func TestExplainLeavesOtherErrors(t *testing.T) {
	other := errors.New("boom")
	if got := testSchema.Explain([]byte("a: 1\n"), other); got != other {
		t.Errorf("got %v, want the error itself", got)
	}
	te := &yaml.TypeError{Errors: []string{"line 1: field x not found in type main.T"}}
	if got := testSchema.Explain([]byte("a: [\n"), te); got != te {
		t.Errorf("got %v, want the error itself", got)
	}
	// A message of no known form is kept; one of a key the walk did not
	// see still loses the Go type.
	got := testSchema.Explain([]byte("a: 1\n"), &yaml.TypeError{Errors: []string{"line 9: something else",
		"line 9: field q not found in type x.Y", "line 9: cannot unmarshal !!str `x` into []x.Y",
		"line 9: cannot unmarshal !!int `1` into x.Y", "line 9: cannot unmarshal !t `` into x.Y"}})
	want := "yaml: unmarshal errors:\n  line 9: something else\n  line 9: unknown key \"q\"\n" +
		"  line 9: want a list, got \"x\"\n  line 9: 1 cannot be read here\n  line 9: a value tagged \"!t\" cannot be read here"
	if got.Error() != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestSchemaUnknown(t *testing.T) {
	got := testSchema.Unknown([]byte("windw: 1m\nitems:\n  - {id: a, shadw: true, algoritm: x}\n"))
	var msgs []string
	for _, u := range got {
		msgs = append(msgs, u.String())
	}
	want := []string{
		`line 1: unknown key "windw" (did you mean "window"?)`,
		`line 3: unknown key "algoritm" (did you mean "algorithm"?)`,
		`line 3: unknown key "shadw" (did you mean "shadow"?)`,
	}
	if strings.Join(msgs, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n  %s\nwant\n  %s", strings.Join(msgs, "\n  "), strings.Join(want, "\n  "))
	}
	// JSON is YAML.
	if got := testSchema.Unknown([]byte(`{"items": [{"id": "a", "requets": 1}]}`)); len(got) != 1 || Suggest(got[0].Key, got[0].Valid) != "requests" {
		t.Errorf("JSON: %+v", got)
	}
	if got := testSchema.Unknown([]byte("a: [")); got != nil {
		t.Errorf("not YAML: %+v", got)
	}
}

func TestKeys(t *testing.T) {
	got := strings.Join(Keys(reflect.TypeFor[*testExtra]()), ",")
	if got != "from,to,tz" {
		t.Errorf("Keys(testExtra) = %s", got)
	}
	if got := Keys(reflect.TypeFor[testOpen]()); len(got) != 1 || got[0] != "name" {
		t.Errorf("Keys(testOpen) = %v, want [name] (an inline map is no key)", got)
	}
	if got := Keys(reflect.TypeFor[int]()); len(got) != 0 {
		t.Errorf("Keys(int) = %v", got)
	}
}

// FuzzExplain: explaining never panics, keeps one message per decoder
// message, each still starting with its line, and never shows the
// decoder's Go type names of the schema.
func FuzzExplain(f *testing.F) {
	for _, s := range []string{
		"items:\n  - id: a\n    algoritm: x\n", "items: {id: a}\n", "window: abc\n",
		"base: &b {requets: 1}\nitems:\n  - <<: *b\n", "items: [{small: -1, key: [a, {b: c}]}]\n",
		"tiers: {VIP: [x]}\nextra: {colour: 1}\n", "- a\n",
		"!%09 ''", // a tag holding a tab: the decoder shows it raw
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		var d testDoc
		err := dec.Decode(&d)
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return
		}
		got := testSchema.Explain(data, err)
		var out *yaml.TypeError
		if !errors.As(got, &out) || len(out.Errors) != min(len(te.Errors), maxExplained+1) {
			t.Fatalf("Explain(%v) = %v", err, got)
		}
		for _, msg := range out.Errors {
			if !strings.HasPrefix(msg, "line ") {
				t.Errorf("message without its line: %q", msg)
			}
			if strings.Contains(msg, "yamlkeys.") {
				t.Errorf("message names a Go type: %q", msg)
			}
		}
	})
}

// A key or value echoed by a message is shown shortened, and quoted when
// it holds a character that is not printable: a message is printed on
// terminals and logged, and a file's bytes must not move the cursor, set
// a title or run on for megabytes.
func TestExplainEchoesSafely(t *testing.T) {
	long := strings.Repeat("K", 5000)
	tests := []struct {
		name, doc string
		want      []string
	}{
		{"a map key with escapes", "tiers:\n  \"\\e[31mVIP\\e]0;t\\a\": [x]\n",
			[]string{`line 2: "\x1b[31mVIP\x1b]0;t\a"[0]: want an integer, got "x"`}},
		{"a long map key", "tiers:\n  ? " + long + "\n  : [x]\n",
			[]string{`line 3: ` + long[:maxShown] + `...[0]: want an integer, got "x"`}},
		{"a value of an odd tag", "items: [{requests: !x \"\\e[2J\"}]\n",
			[]string{`line 1: requests: want an integer, got "\x1b[2J"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := decodeStrict(t, tt.doc)
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

// A document of many errors is explained up to maxExplained messages, the
// rest counted in one: the message of a file of thousands of wrong values
// stays short, and its explanation takes no time quadratic in them.
func TestExplainBoundsItsMessages(t *testing.T) {
	n := maxExplained + 500
	doc := "tiers:\n  VIP: [" + strings.Repeat("x, ", n-1) + "x]\n"
	got := decodeStrict(t, doc)
	if len(got) != maxExplained+1 {
		t.Fatalf("%d messages, want %d", len(got), maxExplained+1)
	}
	if want := `line 2: VIP[0]: want an integer, got "x"`; got[0] != want {
		t.Errorf("first message %q, want %q", got[0], want)
	}
	if want := fmt.Sprintf("line 2: and %d more errors", n-maxExplained); got[maxExplained] != want {
		t.Errorf("last message %q, want %q", got[maxExplained], want)
	}
}

// An error of the decoder other than a *yaml.TypeError shows the value it
// is about as written ("cannot decode !!str `...` as a !!int" for a value
// tagged against its form): its characters that are not printable are
// escaped.
func TestExplainEscapesOtherErrors(t *testing.T) {
	got := decodeStrict(t, "window: !!int \"\\e]0;t\\a\"\n")
	if want := []string{"yaml: cannot decode !!str `\\x1b]0;t\\a` as a !!int"}; strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

func TestEscape(t *testing.T) {
	if got, want := escape("a\x1b\xffé\u202e b"), `a\x1b\xffé\u202e b`; got != want {
		t.Errorf("escape = %q, want %q", got, want)
	}
}
