// Package jsonwire is the client's copy of the limiter's internal/jsonwire
// (its reader, and its writer of strings): a module of its own cannot
// import the limiter's internal packages, and the limiter's tests keep the
// two the same (internal/jsonwire's TestClientCopy).
package jsonwire

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Parser reads one JSON document from a byte slice, strictly: what it
// accepts, encoding/json accepts alike. It holds the document as a string
// too, so that strings without escapes, the usual case, are substrings of
// it: a document costs one allocation however many strings it has.
type Parser struct {
	b []byte
	s string // b as a string, whose substrings Str returns
	i int
}

// New returns a parser of data.
func New(data []byte) Parser {
	return Parser{b: data, s: string(data)}
}

// ErrTrailing is End's error for data after the document.
var ErrTrailing = errors.New("unexpected data after the request object")

// End skips whitespace and reports whether the data is over: ErrTrailing
// when it is not.
func (p *Parser) End() error {
	p.Space()
	if p.i != len(p.b) {
		return ErrTrailing
	}
	return nil
}

// AtEnd skips whitespace and reports whether nothing is left.
func (p *Parser) AtEnd() bool {
	p.Space()
	return p.i == len(p.b)
}

// Peek returns the next byte, or 0 at the end; it consumes nothing.
func (p *Parser) Peek() byte {
	if p.i < len(p.b) {
		return p.b[p.i]
	}
	return 0
}

func (p *Parser) errorf(format string, args ...any) error {
	return fmt.Errorf("offset %d: "+format, append([]any{p.i}, args...)...)
}

// Space skips JSON's whitespace.
func (p *Parser) Space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// Object parses {"name": value, ...}, calling member for each name with the
// parser positioned at its value.
func (p *Parser) Object(member func(name string) error) error {
	if empty, err := p.open('{', '}', "an object"); err != nil || empty {
		return err
	}
	for {
		p.Space()
		name, err := p.Str()
		if err != nil {
			return err
		}
		p.Space()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return p.errorf("expected ':' after object key")
		}
		p.i++
		p.Space()
		if err := member(name); err != nil {
			return err
		}
		if more, err := p.more('}', "object value"); err != nil || !more {
			return err
		}
	}
}

// Array parses [value, ...], calling elem with each one's index and the
// parser positioned at it.
func (p *Parser) Array(elem func(i int) error) error {
	if empty, err := p.open('[', ']', "an array"); err != nil || empty {
		return err
	}
	for i := 0; ; i++ {
		p.Space()
		if err := elem(i); err != nil {
			return err
		}
		if more, err := p.more(']', "array element"); err != nil || !more {
			return err
		}
	}
}

// open consumes the opener of an object or array (what names it) and,
// when closer follows at once, the closer too: empty is then true.
func (p *Parser) open(opener, closer byte, what string) (empty bool, err error) {
	if p.i >= len(p.b) || p.b[p.i] != opener {
		return false, p.errorf("expected %s", what)
	}
	p.i++
	p.Space()
	if p.i < len(p.b) && p.b[p.i] == closer {
		p.i++
		return true, nil
	}
	return false, nil
}

// more consumes what follows a member or element (after names it): a ','
// (more is true) or closer (the end).
func (p *Parser) more(closer byte, after string) (more bool, err error) {
	p.Space()
	if p.i >= len(p.b) {
		return false, p.errorf("unexpected end of input")
	}
	switch p.b[p.i] {
	case ',':
		p.i++
		return true, nil
	case closer:
		p.i++
		return false, nil
	}
	return false, p.errorf("expected ',' or '%c' after %s", closer, after)
}

// Null consumes a JSON null, if one comes next.
func (p *Parser) Null() bool {
	if len(p.b)-p.i >= 4 && string(p.b[p.i:p.i+4]) == "null" {
		p.i += 4
		return true
	}
	return false
}

// Str parses a JSON string. Strings without escapes, the usual case, are
// substrings of the document and allocate nothing; invalid UTF-8 is an
// error rather than replaced.
func (p *Parser) Str() (string, error) {
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

func (p *Parser) escapedStr(start int) (string, error) {
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

func (p *Parser) hex4() (rune, bool) {
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

// Integer parses a JSON number that must be an integer fitting in int64.
func (p *Parser) Integer() (int64, error) {
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

// Bool parses true or false.
func (p *Parser) Bool() (bool, error) {
	switch {
	case len(p.b)-p.i >= 4 && string(p.b[p.i:p.i+4]) == "true":
		p.i += 4
		return true, nil
	case len(p.b)-p.i >= 5 && string(p.b[p.i:p.i+5]) == "false":
		p.i += 5
		return false, nil
	}
	return false, p.errorf("expected true or false")
}

// maxSkipDepth bounds the nesting Skip follows, so that a hostile value
// cannot exhaust the stack.
const maxSkipDepth = 64

// Skip parses any JSON value and drops it: a field a reader does not know,
// which a newer writer may send.
func (p *Parser) Skip() error { return p.skip(0) }

func (p *Parser) skip(depth int) error {
	if depth > maxSkipDepth {
		return p.errorf("nested deeper than %d", maxSkipDepth)
	}
	switch c := p.Peek(); {
	case c == '{':
		return p.Object(func(string) error { return p.skip(depth + 1) })
	case c == '[':
		return p.Array(func(int) error { return p.skip(depth + 1) })
	case c == '"':
		_, err := p.Str()
		return err
	case c == 't' || c == 'f':
		_, err := p.Bool()
		return err
	case c == 'n':
		if p.Null() {
			return nil
		}
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	}
	return p.errorf("expected a value")
}

// number parses any JSON number.
func (p *Parser) number() error {
	if p.i < len(p.b) && p.b[p.i] == '-' {
		p.i++
	}
	digits := func() int {
		n := 0
		for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	first := p.i
	if n := digits(); n == 0 {
		return p.errorf("expected a number")
	} else if n > 1 && p.b[first] == '0' {
		return p.errorf("invalid number")
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if digits() == 0 {
			return p.errorf("invalid number")
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return p.errorf("invalid number")
		}
	}
	return nil
}
