package httpapi

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
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
	p := jsonParser{b: data, s: string(data)}
	p.space()
	if p.i == len(p.b) {
		return errors.New("empty body")
	}
	if err := p.object(func(field string) error { return p.checkField(field, body) }); err != nil {
		return err
	}
	p.space()
	if p.i != len(p.b) {
		return errTrailing
	}
	return nil
}

var errTrailing = errors.New("unexpected data after the request object")

// parseBatchBody decodes the body of POST /v1/check/batch, {"checks":
// [check, ...]}, as parseCheckBody does one check, calling each with the
// i-th check's body in turn; an error of each ends the parse and is
// returned as it is. One allocation for the strings of every check, as for
// one.
func parseBatchBody(data []byte, each func(i int, body *checkBody) error) error {
	p := jsonParser{b: data, s: string(data)}
	p.space()
	if p.i == len(p.b) {
		return errors.New("empty body")
	}
	seen := false
	err := p.object(func(field string) error {
		switch {
		case field != "checks":
			return fmt.Errorf("unknown field %q", field)
		case seen: // encoding/json would keep the last: refuse rather than guess
			return errors.New("checks: given twice")
		}
		seen = true
		return p.array(func(i int) error {
			var body checkBody
			if err := p.object(func(field string) error { return p.checkField(field, &body) }); err != nil {
				return fmt.Errorf("checks[%d]: %w", i, err)
			}
			return each(i, &body)
		})
	})
	if err != nil {
		return err
	}
	p.space()
	if p.i != len(p.b) {
		return errTrailing
	}
	return nil
}

type jsonParser struct {
	b []byte
	s string // b as a string, whose substrings str returns
	i int
}

func (p *jsonParser) errorf(format string, args ...any) error {
	return fmt.Errorf("offset %d: "+format, append([]any{p.i}, args...)...)
}

func (p *jsonParser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// object parses {"name": value, ...}, calling member for each name with the
// parser positioned at its value.
func (p *jsonParser) object(member func(name string) error) error {
	if p.i >= len(p.b) || p.b[p.i] != '{' {
		return p.errorf("expected an object")
	}
	p.i++
	p.space()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return nil
	}
	for {
		p.space()
		name, err := p.str()
		if err != nil {
			return err
		}
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return p.errorf("expected ':' after object key")
		}
		p.i++
		p.space()
		if err := member(name); err != nil {
			return err
		}
		p.space()
		if p.i >= len(p.b) {
			return p.errorf("unexpected end of input")
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case '}':
			p.i++
			return nil
		default:
			return p.errorf("expected ',' or '}' after object value")
		}
	}
}

func (p *jsonParser) checkField(field string, body *checkBody) error {
	switch field {
	case "user_id":
		return p.optionalString(&body.UserID, field)
	case "ip":
		return p.optionalString(&body.IP, field)
	case "endpoint":
		return p.optionalString(&body.Endpoint, field)
	case "method":
		return p.optionalString(&body.Method, field)
	case "tier":
		return p.optionalString(&body.Tier, field)
	case "cost":
		if p.null() {
			return nil
		}
		n, err := p.integer()
		if err != nil {
			return fmt.Errorf("cost: %w", err)
		}
		body.Cost = n
		return nil
	case "attributes":
		if p.null() {
			return nil
		}
		if body.Attributes == nil {
			body.Attributes = make(map[string]string)
		}
		return p.object(func(name string) error {
			var v string
			if err := p.optionalString(&v, "attributes."+name); err != nil {
				return err
			}
			body.Attributes[name] = v
			return nil
		})
	default:
		return fmt.Errorf("unknown field %q", field)
	}
}

// array parses [value, ...], calling elem with each one's index and the
// parser positioned at it.
func (p *jsonParser) array(elem func(i int) error) error {
	if p.i >= len(p.b) || p.b[p.i] != '[' {
		return p.errorf("expected an array")
	}
	p.i++
	p.space()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return nil
	}
	for i := 0; ; i++ {
		p.space()
		if err := elem(i); err != nil {
			return err
		}
		p.space()
		if p.i >= len(p.b) {
			return p.errorf("unexpected end of input")
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case ']':
			p.i++
			return nil
		default:
			return p.errorf("expected ',' or ']' after array element")
		}
	}
}

// null consumes a JSON null, which leaves a field unchanged (as encoding/json).
func (p *jsonParser) null() bool {
	if len(p.b)-p.i >= 4 && string(p.b[p.i:p.i+4]) == "null" {
		p.i += 4
		return true
	}
	return false
}

func (p *jsonParser) optionalString(dst *string, field string) error {
	if p.null() {
		return nil
	}
	s, err := p.str()
	if err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	*dst = s
	return nil
}

// str parses a JSON string. Strings without escapes, the usual case, are
// substrings of p.s and allocate nothing.
func (p *jsonParser) str() (string, error) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return "", p.errorf("expected a string")
	}
	p.i++
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			s := p.b[start:p.i]
			p.i++
			if !utf8.Valid(s) {
				return "", errors.New("string is not valid UTF-8")
			}
			return p.s[start : p.i-1], nil
		case c == '\\':
			return p.escapedStr(start)
		case c < 0x20:
			return "", p.errorf("control character in string")
		}
		p.i++
	}
	return "", p.errorf("unterminated string")
}

func (p *jsonParser) escapedStr(start int) (string, error) {
	out := append(make([]byte, 0, p.i-start+16), p.b[start:p.i]...)
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			if !utf8.Valid(out) {
				return "", errors.New("string is not valid UTF-8")
			}
			return string(out), nil
		case c < 0x20:
			return "", p.errorf("control character in string")
		case c != '\\':
			out = append(out, c)
			p.i++
			continue
		}
		if p.i+1 >= len(p.b) {
			break
		}
		esc := p.b[p.i+1]
		p.i += 2
		switch esc {
		case '"', '\\', '/':
			out = append(out, esc)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return "", p.errorf("invalid \\u escape")
			}
			if utf16.IsSurrogate(r) {
				// A valid pair makes one rune; anything else is U+FFFD, as
				// encoding/json does.
				r2 := rune(-1)
				if len(p.b)-p.i >= 6 && p.b[p.i] == '\\' && p.b[p.i+1] == 'u' {
					save := p.i
					p.i += 2
					if v, ok := p.hex4(); ok {
						r2 = v
					}
					if utf16.DecodeRune(r, r2) == utf8.RuneError {
						p.i, r2 = save, -1
					}
				}
				r = utf16.DecodeRune(r, r2)
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", p.errorf("invalid escape \\%c", esc)
		}
	}
	return "", p.errorf("unterminated string")
}

func (p *jsonParser) hex4() (rune, bool) {
	if len(p.b)-p.i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range p.b[p.i : p.i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	p.i += 4
	return r, true
}

// integer parses a JSON number that must be an integer fitting in int64.
func (p *jsonParser) integer() (int64, error) {
	start := p.i
	if p.i < len(p.b) && p.b[p.i] == '-' {
		p.i++
	}
	digits := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	switch {
	case p.i == digits:
		return 0, p.errorf("expected a number")
	case p.b[digits] == '0' && p.i-digits > 1:
		return 0, p.errorf("invalid number")
	case p.i < len(p.b) && (p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E'):
		return 0, errors.New("must be an integer")
	}
	n, err := strconv.ParseInt(string(p.b[start:p.i]), 10, 64)
	if err != nil {
		return 0, errors.New("out of range")
	}
	return n, nil
}
