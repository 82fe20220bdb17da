package rules

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"
)

// Timestamp is a time written in RFC 3339 ("2026-11-27T00:00:00Z") in YAML
// and JSON. The zero Timestamp means "not set".
type Timestamp struct{ time.Time }

func parseTimestamp(s string) (Timestamp, error) {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return Timestamp{}, fmt.Errorf("invalid time %q (want RFC 3339 such as 2026-11-27T00:00:00Z)", truncate(s, 40))
	}
	return Timestamp{t}, nil
}

// UnmarshalYAML accepts an RFC 3339 scalar. Its errors are type errors,
// so that the decoder goes on and reports every problem.
func (t *Timestamp) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return lineError(n, "time must be an RFC 3339 string")
	}
	v, err := parseTimestamp(n.Value)
	if err != nil {
		return lineError(n, err.Error())
	}
	*t = v
	return nil
}

// MarshalYAML writes t in RFC 3339.
func (t Timestamp) MarshalYAML() (any, error) { return t.Format(time.RFC3339Nano), nil }

// UnmarshalJSON accepts an RFC 3339 JSON string.
func (t *Timestamp) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return &json.UnmarshalTypeError{Value: truncate(string(b), 32), Type: reflect.TypeFor[Timestamp]()}
	}
	v, err := parseTimestamp(s)
	if err != nil {
		return &json.UnmarshalTypeError{Value: "string " + strconv.Quote(truncate(s, 40)), Type: reflect.TypeFor[Timestamp]()}
	}
	*t = v
	return nil
}

// MarshalJSON writes t as an RFC 3339 JSON string.
func (t Timestamp) MarshalJSON() ([]byte, error) { return json.Marshal(t.Format(time.RFC3339Nano)) }
