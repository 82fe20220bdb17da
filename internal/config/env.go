// Package config loads each service's configuration from the environment,
// applies defaults and validates every value before anything starts. Errors
// name the variable and what it expected, one line each.
package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/internal/ipprefix"
)

// env reads variables with defaults and collects one error per bad value, so
// a misconfigured process reports every problem at once.
type env struct {
	getenv func(string) string
	errs   []error
}

func (e *env) fail(name, expected, got string) {
	e.errs = append(e.errs, fmt.Errorf("%s: expected %s, got %q", name, expected, got))
}

func (e *env) err() error { return errors.Join(e.errs...) }

func (e *env) str(name, def string) string {
	if v := strings.TrimSpace(e.getenv(name)); v != "" {
		return v
	}
	return def
}

func (e *env) list(name, def string) []string {
	var out []string
	for _, part := range strings.Split(e.str(name, def), ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

func (e *env) duration(name string, def time.Duration) time.Duration {
	raw := e.str(name, "")
	if raw == "" {
		return def
	}
	d, err := time.ParseDuration(raw)
	if err != nil || d <= 0 {
		e.fail(name, "a positive duration such as 50ms or 10s", raw)
		return def
	}
	return d
}

// durationOrZero is duration accepting 0 (off).
func (e *env) durationOrZero(name string, def time.Duration) time.Duration {
	raw := e.str(name, "")
	if raw == "" {
		return def
	}
	d, err := time.ParseDuration(raw)
	if err != nil || d < 0 {
		e.fail(name, "a duration such as 0, 200us or 1ms", raw)
		return def
	}
	return d
}

func (e *env) integer(name string, def, lo, hi int) int {
	raw := e.str(name, "")
	if raw == "" {
		return def
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < lo || n > hi {
		e.fail(name, fmt.Sprintf("an integer between %d and %d", lo, hi), raw)
		return def
	}
	return n
}

func (e *env) oneOf(name, def string, allowed ...string) string {
	v := e.str(name, def)
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	e.fail(name, "one of "+strings.Join(allowed, ", "), v)
	return def
}

func (e *env) hostPorts(name, def string) []string {
	addrs := e.list(name, def)
	for _, a := range addrs {
		if !validHostPort(a, true) {
			e.fail(name, "a comma-separated list of host:port", a)
		}
	}
	return addrs
}

// validHostPort reports whether a is host:port (or :port when the host is
// optional) with a numeric port.
func validHostPort(a string, needHost bool) bool {
	host, port, err := net.SplitHostPort(a)
	if err != nil || (needHost && host == "") {
		return false
	}
	_, err = strconv.ParseUint(port, 10, 16)
	return err == nil
}

func (e *env) prefixes(name string) []netip.Prefix {
	var out []netip.Prefix
	for _, raw := range e.list(name, "") {
		p, err := ipprefix.Parse(raw)
		if err != nil {
			e.fail(name, "a comma-separated list of IP addresses or CIDR prefixes", raw)
			continue
		}
		out = append(out, p)
	}
	return out
}

// readableDir reads an optional directory: empty means none; when set it
// must be a directory that can be listed, checked now so that a wrong path
// stops the process at start.
func (e *env) readableDir(name string) string {
	v := e.str(name, "")
	if v == "" {
		return ""
	}
	info, err := os.Stat(v)
	switch {
	case err != nil:
		e.errs = append(e.errs, fmt.Errorf("%s: %w", name, err))
	case !info.IsDir():
		e.fail(name, "a readable directory", v)
	default:
		if _, err := os.ReadDir(v); err != nil {
			e.errs = append(e.errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	return v
}
