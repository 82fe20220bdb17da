package rules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/ratewarden/ratewarden/internal/yamlkeys"
)

const defaultPriority = 100

// fileSchema explains the decoder's errors (yamlkeys): a Rule decodes
// through its plain copy, so its keys are checked too; the errors of a
// duration or a time get the key they are written under.
var fileSchema = yamlkeys.Schema{Type: reflect.TypeFor[File](), Through: []reflect.Type{reflect.TypeFor[Rule]()},
	Labelled: []reflect.Type{reflect.TypeFor[Duration](), reflect.TypeFor[Timestamp]()}}

// Parse decodes and validates a rules file. Unknown keys are rejected
// (with the key they likely misspell); a YAML error names its line and the
// rule written there, and a value of the wrong form its key and the form
// wanted; validation reports every problem (errors.Join
// of *FieldError). Left-out detection sections get DefaultDetection's. An
// empty document is refused (write "rules: []" for no rules), so a
// truncated file never silently drops every limit.
func Parse(data []byte) (*File, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f File
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("rules file is empty (write \"rules: []\" for no rules)")
		}
		return nil, nameRulesInDecodeError(data, fileSchema.Explain(data, err))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("line %d: rules file must hold one YAML document", extra.Line)
	}
	if err := checkNullRules(data); err != nil {
		return nil, err
	}
	f.Detection = f.Detection.WithDefaults()
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return &f, nil
}

// checkNullRules refuses empty entries in the rules list ("- " or
// "- null"), which the YAML decoder would drop silently.
func checkNullRules(data []byte) error {
	var doc struct {
		Rules []yaml.Node `yaml:"rules"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return err
	}
	for i, n := range doc.Rules {
		if n.ShortTag() == "!!null" {
			return fmt.Errorf("line %d: rules[%d]: empty rule", n.Line, i)
		}
	}
	return nil
}

// LoadFile reads and parses the rules file at path.
func LoadFile(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// UnmarshalYAML applies the rule defaults (priority 100, on_redis_failure
// local) before decoding. It uses the function form so that the decoder's
// strictness (unknown fields) carries over.
func (r *Rule) UnmarshalYAML(unmarshal func(any) error) error {
	type plain Rule
	p := plain{Priority: defaultPriority, OnRedisFailure: FailLocal}
	if err := unmarshal(&p); err != nil {
		return err
	}
	*r = Rule(p)
	r.dropOffLease()
	return nil
}

// ParseRuleJSON decodes and validates one rule written as JSON, as the admin
// API receives it: the rules-file schema with durations as strings
// ("per": "1m") and times in RFC 3339. Unknown fields are rejected. Defaults
// are those of the rules file.
func ParseRuleJSON(data []byte) (Rule, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	r := Rule{Priority: defaultPriority, OnRedisFailure: FailLocal}
	var unknown []error
	if err := dec.Decode(&r); err != nil {
		if !strings.HasPrefix(err.Error(), "json: unknown field ") {
			return Rule{}, jsonError(err)
		}
		// encoding/json stops reporting at the first unknown key; every
		// field at fault is named, the rule's other problems too.
		for _, fe := range unknownFields(data, reflect.TypeFor[Rule](), r.ID) {
			unknown = append(unknown, fe)
		}
		if len(unknown) == 0 { // a key matched differently: say what encoding/json said
			unknown = append(unknown, &FieldError{RuleID: r.ID, Field: strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`),
				Reason: "unknown field"})
		}
		// The decoder kept only its first error: decode again, known fields
		// only, to find a type error after the unknown key.
		r = Rule{Priority: defaultPriority, OnRedisFailure: FailLocal}
		if err := json.NewDecoder(bytes.NewReader(data)).Decode(&r); err != nil {
			return Rule{}, errors.Join(append(unknown, jsonError(err))...)
		}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Rule{}, errors.New("rule: unexpected data after the JSON object")
	}
	r.dropOffLease()
	if err := errors.Join(append(unknown, r.Validate())...); err != nil {
		return Rule{}, err
	}
	return r, nil
}

// jsonError turns a JSON type error into a FieldError naming the field.
func jsonError(err error) error {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || te.Field == "" {
		return fmt.Errorf("rule: %w", err)
	}
	want := te.Type.String()
	switch te.Type {
	case reflect.TypeFor[Duration]():
		want = `a duration string such as "500ms", "10s", "5m", "1h"`
	case reflect.TypeFor[Timestamp]():
		want = "an RFC 3339 time string"
	case reflect.TypeFor[int64](), reflect.TypeFor[int]():
		want = "an integer"
	case reflect.TypeFor[string]():
		want = "a string"
	case reflect.TypeFor[Lease]():
		want = `true, false or an object such as {"max_units": 500}`
	default:
		// The form, never the Go type ("rules.Limit", "[]string"), which
		// means nothing to whoever wrote the rule.
		switch te.Type.Kind() {
		case reflect.Struct, reflect.Map:
			want = "an object"
		case reflect.Slice, reflect.Array:
			want = "a list"
		case reflect.Bool:
			want = "true or false"
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			want = "an integer"
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			want = "an integer of at least 0"
		case reflect.Float32, reflect.Float64:
			want = "a number"
		case reflect.String:
			want = "a string"
		}
	}
	return &FieldError{Field: te.Field, Reason: fmt.Sprintf("cannot use %s: want %s", te.Value, want)}
}

// LoadSet loads, validates and compiles the rules file at path; errors name
// the file.
func LoadSet(path string, opts Options) (*Set, error) {
	f, err := LoadFile(path)
	if err != nil {
		return nil, fmt.Errorf("RULES_FILE: %w", err) // names the file already
	}
	set, err := Compile(f, opts)
	if err != nil {
		return nil, fmt.Errorf("RULES_FILE %s: %w", path, err)
	}
	return set, nil
}
