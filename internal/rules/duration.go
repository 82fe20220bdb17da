package rules

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a time.Duration written in Go syntax ("500ms", "10s", "5m",
// "1h") in YAML and JSON. It marshals back to that string.
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String returns d in Go syntax as the rules file writes it, without
// zero units: "1m" rather than time.Duration's "1m0s", "1h30m", "30s",
// "500ms", "1m30.5s". parseDuration(d.String()) is d for every d.
func (d Duration) String() string { return formatDuration(time.Duration(d)) }

// formatDuration writes d as Duration.String does.
func formatDuration(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	var b []byte
	u := uint64(d) // the magnitude, which -d would overflow at the minimum
	if d < 0 {
		b = append(b, '-')
		u = -u
	}
	h, m := u/uint64(time.Hour), u/uint64(time.Minute)%60
	sec, frac := u/uint64(time.Second)%60, u%uint64(time.Second)
	if h > 0 {
		b = append(strconv.AppendUint(b, h, 10), 'h')
	}
	if m > 0 {
		b = append(strconv.AppendUint(b, m, 10), 'm')
	}
	switch {
	case frac == 0:
		if sec > 0 {
			b = append(strconv.AppendUint(b, sec, 10), 's')
		}
	case sec > 0: // seconds with a fraction: 1.5s
		b = strconv.AppendUint(b, sec, 10)
		f := strconv.AppendUint(nil, frac+uint64(time.Second), 10)[1:] // nine digits
		for f[len(f)-1] == '0' {
			f = f[:len(f)-1]
		}
		b = append(append(append(b, '.'), f...), 's')
	case frac%uint64(time.Millisecond) == 0:
		b = append(strconv.AppendUint(b, frac/uint64(time.Millisecond), 10), "ms"...)
	case frac%uint64(time.Microsecond) == 0:
		b = append(strconv.AppendUint(b, frac/uint64(time.Microsecond), 10), "us"...)
	default:
		b = append(strconv.AppendUint(b, frac, 10), "ns"...)
	}
	return string(b)
}

// parseDuration parses s in Go syntax. Unlike time.ParseDuration it names
// the expected form in its error.
func parseDuration(s string) (Duration, error) {
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q (want Go syntax such as 500ms, 10s, 5m, 1h)", s)
	}
	return Duration(v), nil
}

// UnmarshalYAML accepts a scalar in Go duration syntax. Its errors are
// type errors, so that the decoder goes on and reports every problem.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return lineError(n, "duration must be a string such as 10s")
	}
	v, err := parseDuration(n.Value)
	if err != nil {
		return lineError(n, err.Error())
	}
	*d = v
	return nil
}

// lineError is a decoding error of node n: a type error, which the decoder
// collects with the others.
func lineError(n *yaml.Node, msg string) error {
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %s", n.Line, msg)}}
}

// MarshalYAML writes d in Go syntax.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// UnmarshalJSON accepts a JSON string in Go duration syntax.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return &json.UnmarshalTypeError{Value: truncate(string(b), 32), Type: reflect.TypeFor[Duration]()}
	}
	v, err := parseDuration(s)
	if err != nil {
		// A type error gets the field path from encoding/json.
		return &json.UnmarshalTypeError{Value: "string " + strconv.Quote(truncate(s, 32)), Type: reflect.TypeFor[Duration]()}
	}
	*d = v
	return nil
}

// MarshalJSON writes d as a JSON string in Go syntax.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
