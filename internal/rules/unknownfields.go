package rules

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/ratewarden/ratewarden/internal/yamlkeys"
)

// unknownFields lists, in document order, every key of the JSON value data
// that names no field of t where it stands, with its path as validation
// names fields ("match.verbs", "limits[1].every", "tiers.VIP[0].x").
// encoding/json reports only the first unknown key, without its path; the
// admin API promises every field at fault. Values of a type that decodes
// itself (durations, times, lease) are not looked into: their decoders judge
// them. A value of the wrong JSON kind is skipped, its type error is the
// decoder's to report.
//
// Past maxUnknownFields, the rest are counted in the last one's reason,
// and a path shows each key shortened (yamlkeys.Shown): a body of 64 KiB
// can hold thousands of unknown keys under one long map key.
func unknownFields(data []byte, t reflect.Type, ruleID string) []*FieldError {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var out []*FieldError
	more := 0
	_ = walkUnknown(dec, t, "", func(path, key string, in reflect.Type) {
		if len(out) > maxUnknownFields {
			more++
			return
		}
		reason := "unknown field"
		// A rule's json names are its yaml names.
		if s := yamlkeys.Suggest(key, yamlkeys.Keys(in)); s != "" {
			reason += fmt.Sprintf(" (did you mean %q?)", s)
		}
		out = append(out, &FieldError{RuleID: ruleID, Field: path, Reason: reason})
	})
	if more > 0 {
		out[maxUnknownFields].Reason = fmt.Sprintf("unknown field, and %d more", more)
	}
	return out
}

// maxUnknownFields bounds the unknown fields listed one by one.
const maxUnknownFields = 50

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// walkUnknown consumes one value of dec, read as a t at path, and calls
// unknown for each key that names no field.
func walkUnknown(dec *json.Decoder, t reflect.Type, path string, unknown func(path, key string, in reflect.Type)) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return skipValue(dec)
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	delim, ok := tok.(json.Delim)
	switch {
	case !ok:
		return nil // a scalar
	case delim == '[' && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array):
		for i := 0; dec.More(); i++ {
			if err := walkUnknown(dec, t.Elem(), path+"["+strconv.Itoa(i)+"]", unknown); err != nil {
				return err
			}
		}
	case delim == '{' && (t.Kind() == reflect.Struct || t.Kind() == reflect.Map):
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return err
			}
			key, _ := tok.(string)
			at := yamlkeys.Shown(key)
			if path != "" {
				at = path + "." + at
			}
			elem := t
			if t.Kind() == reflect.Map {
				elem = t.Elem()
			} else if f, ok := jsonField(t, key); ok {
				elem = f.Type
			} else {
				unknown(at, key, t)
				if err := skipValue(dec); err != nil {
					return err
				}
				continue
			}
			if err := walkUnknown(dec, elem, at, unknown); err != nil {
				return err
			}
		}
	default:
		return skipRest(dec)
	}
	_, err = dec.Token() // the closing delimiter
	return err
}

// jsonField finds the field of struct t that encoding/json decodes key into:
// its exact name first, else one equal under case folding, as encoding/json
// matches.
func jsonField(t reflect.Type, key string) (reflect.StructField, bool) {
	var folded reflect.StructField
	found := false
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		if name == key {
			return f, true
		}
		if !found && strings.EqualFold(name, key) {
			folded, found = f, true
		}
	}
	return folded, found
}

// skipValue consumes one whole value of dec.
func skipValue(dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); ok && (d == '{' || d == '[') {
		return skipRest(dec)
	}
	return nil
}

// skipRest consumes the rest of an object or array whose opening
// delimiter was read, the closing one included.
func skipRest(dec *json.Decoder) error {
	for depth := 1; depth > 0; {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if d, ok := tok.(json.Delim); ok {
			if d == '{' || d == '[' {
				depth++
			} else {
				depth--
			}
		}
	}
	return nil
}
