package httpapi

import (
	"errors"
	"fmt"

	"github.com/ratewarden/ratewarden/internal/jsonwire"
)

// parseCheckBody decodes the JSON body of POST /v1/check into body without
// reflection: it runs on every request. It is stricter than encoding/json
// (field names are case-sensitive, cost must be an integer, invalid UTF-8 is
// an error rather than replaced) and accepts nothing encoding/json would
// reject; a differential fuzz test holds it to that.
//
// The body is converted to a string once; strings without escapes, the
// usual case, are substrings of it, so a body costs one allocation however
// many fields it has.
func parseCheckBody(data []byte, body *checkBody) error {
	p := jsonwire.New(data)
	if p.AtEnd() {
		return errors.New("empty body")
	}
	if err := p.Object(func(field string) error { return checkField(&p, field, body) }); err != nil {
		return err
	}
	return p.End()
}

// parseBatchBody decodes the body of POST /v1/check/batch, {"checks":
// [check, ...], "headers": bool}, as parseCheckBody does one check, calling
// each with the i-th check's body in turn; an error of each ends the parse
// and is returned as it is. headers is set to the body's
// "headers" (absent or null: false). One allocation for the strings of every
// check, as for one.
func parseBatchBody(data []byte, headers *bool, each func(i int, body *checkBody) error) error {
	p := jsonwire.New(data)
	if p.AtEnd() {
		return errors.New("empty body")
	}
	seen, seenHeaders := false, false
	err := p.Object(func(field string) error {
		switch {
		case field == "headers" && !seenHeaders:
			seenHeaders = true
			if p.Null() {
				return nil
			}
			var err error
			*headers, err = p.Bool()
			return err
		case field == "headers":
			return errors.New("headers: given twice")
		case field != "checks":
			return fmt.Errorf("unknown field %q", field)
		case seen: // encoding/json would keep the last: refuse rather than guess
			return errors.New("checks: given twice")
		}
		seen = true
		return p.Array(func(i int) error {
			var body checkBody
			if err := p.Object(func(field string) error { return checkField(&p, field, &body) }); err != nil {
				return fmt.Errorf("checks[%d]: %w", i, err)
			}
			return each(i, &body)
		})
	})
	if err != nil {
		return err
	}
	return p.End()
}

func checkField(p *jsonwire.Parser, field string, body *checkBody) error {
	switch field {
	case "user_id":
		return optionalString(p, &body.UserID, field)
	case "ip":
		return optionalString(p, &body.IP, field)
	case "endpoint":
		return optionalString(p, &body.Endpoint, field)
	case "method":
		return optionalString(p, &body.Method, field)
	case "tier":
		return optionalString(p, &body.Tier, field)
	case "cost":
		if p.Null() {
			return nil
		}
		n, err := p.Integer()
		if err != nil {
			return fmt.Errorf("cost: %w", err)
		}
		body.Cost = n
		return nil
	case "reserve":
		if p.Null() {
			return nil
		}
		n, err := p.Integer()
		if err != nil {
			return fmt.Errorf("reserve: %w", err)
		}
		body.Reserve = n
		return nil
	case "attributes":
		if p.Null() {
			return nil
		}
		if body.Attributes == nil {
			body.Attributes = make(map[string]string)
		}
		return p.Object(func(name string) error {
			var v string
			if err := optionalString(p, &v, "attributes."+name); err != nil {
				return err
			}
			body.Attributes[name] = v
			return nil
		})
	default:
		return fmt.Errorf("unknown field %q", field)
	}
}

func optionalString(p *jsonwire.Parser, dst *string, field string) error {
	if p.Null() {
		return nil
	}
	s, err := p.Str()
	if err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	*dst = s
	return nil
}
