package client

import (
	"fmt"
	"strings"
	"time"
)

// decisionFields are the exported fields of Decision, which is printed as
// one of these: the unexported ones are the middleware's copy of the
// limiter's headers, meaningless in a log line.
type decisionFields struct {
	Allowed           bool
	Reason            string
	RuleID            string
	Algorithm         string
	Limit, Remaining  int64
	Reset, RetryAfter time.Duration
	Mode              string
	Shadow            bool
	EventID           string
	Fallback          bool
	Hold              string
}

// Format prints d as fmt prints a struct of its exported fields only, with
// every verb and flag: %v, %+v (with the field names) and %#v (Go syntax,
// as a client.Decision); the limiter's headers the middleware keeps are
// left out.
func (d Decision) Format(f fmt.State, verb rune) {
	v := decisionFields{Allowed: d.Allowed, Reason: d.Reason, RuleID: d.RuleID, Algorithm: d.Algorithm,
		Limit: d.Limit, Remaining: d.Remaining, Reset: d.Reset, RetryAfter: d.RetryAfter, Mode: d.Mode,
		Shadow: d.Shadow, EventID: d.EventID, Fallback: d.Fallback, Hold: d.Hold}
	s := fmt.Sprintf(fmt.FormatString(f, verb), v)
	if verb == 'v' && f.Flag('#') {
		s = strings.Replace(s, "client.decisionFields{", "client.Decision{", 1)
	}
	_, _ = f.Write([]byte(s))
}

// String returns d as %v prints it.
func (d Decision) String() string { return fmt.Sprint(d) }

// plainConfig is Config without its methods, so that Config's Format can
// print one.
type plainConfig Config

// Format prints c as fmt prints a struct, with every verb and flag, but
// with "[redacted]" for a Token that is set: a Config written to a log
// line must not show the limiter's credential.
func (c Config) Format(f fmt.State, verb rune) {
	if c.Token != "" {
		c.Token = "[redacted]"
	}
	s := fmt.Sprintf(fmt.FormatString(f, verb), plainConfig(c))
	if verb == 'v' && f.Flag('#') {
		s = strings.Replace(s, "client.plainConfig{", "client.Config{", 1)
	}
	_, _ = f.Write([]byte(s))
}

// Format prints c as its Config, the token redacted: the Client's own
// fields hold the token too, and fmt would print them.
func (c *Client) Format(f fmt.State, verb rune) {
	c.cfg.Format(f, verb)
}
