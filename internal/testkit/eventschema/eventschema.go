// Package eventschema checks event messages against the JSON Schemas of
// deploy/schemas (decision, outcome and ban .schema.json), for tests: the
// schemas are what consumers validate against, so every event the services
// emit must pass them. Formats (date-time, uuid, ipv4, ipv6) are asserted,
// not just annotated.
package eventschema

import (
	"bytes"
	"fmt"
	"path/filepath"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Schema is one compiled event schema.
type Schema struct {
	path   string
	schema *jsonschema.Schema
}

// Compile reads and compiles the JSON Schema file at path (relative to the
// working directory, which is the package directory under go test). The
// schema itself is checked against its meta-schema (draft 2020-12).
func Compile(path string) (*Schema, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("schema %s: %w", path, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	s, err := c.Compile(abs)
	if err != nil {
		return nil, fmt.Errorf("schema %s: %w", path, err)
	}
	return &Schema{path: path, schema: s}, nil
}

// Validate checks one message value. Numbers are kept exact (json.Number),
// so an integer field holding 1.5 or 1e400 is reported, not rounded.
func (s *Schema) Validate(msg []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(msg))
	if err != nil {
		return fmt.Errorf("%s: not JSON: %w", filepath.Base(s.path), err)
	}
	if err := s.schema.Validate(v); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(s.path), err)
	}
	return nil
}
