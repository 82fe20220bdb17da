package rules

import (
	"errors"
	"fmt"
)

// FieldError is one validation problem: the rule (when the problem is in a
// rule with a usable id), the field at fault and the reason. Validation
// returns every problem joined with errors.Join; use errors.As or
// FieldErrors to get them one by one.
type FieldError struct {
	RuleID string // empty outside rules, or when the rule has no id
	Field  string // e.g. "limits[1].per", "rules[3].id", "exempt.ips[0]"
	Reason string
}

func (e *FieldError) Error() string {
	if e.RuleID != "" {
		return fmt.Sprintf("rule %q: %s: %s", e.RuleID, e.Field, e.Reason)
	}
	return e.Field + ": " + e.Reason
}

// FieldErrors returns the FieldErrors inside err (joined or wrapped).
func FieldErrors(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	walk = func(err error) {
		if err == nil {
			return
		}
		if fe, ok := err.(*FieldError); ok {
			out = append(out, fe)
			return
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return out
}

// problems collects FieldErrors under a common rule id and field prefix.
type problems struct {
	ruleID string
	prefix string // field prefix, e.g. "rules[3]." for a rule without id
	errs   *[]error
}

func newProblems() problems { return problems{errs: new([]error)} }

// add records a problem with field (relative to the current prefix).
func (p problems) add(field, format string, args ...any) {
	*p.errs = append(*p.errs, &FieldError{RuleID: p.ruleID, Field: p.prefix + field, Reason: fmt.Sprintf(format, args...)})
}

// at returns a collector for the sub-field field.
func (p problems) at(field string) problems {
	p.prefix += field + "."
	return p
}

func (p problems) err() error { return errors.Join(*p.errs...) }
