package config

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ratewarden/ratewarden/internal/accesslog"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/ipprefix"
)

// The parsers of the table's rows. Each takes the value (or the row's
// default) with spaces trimmed, "" when both are empty, and says what it
// expected when the value is wrong; the row's name is put in front.

// expected is the error of a value that is not what its variable takes.
func expected(what, got string) error { return fmt.Errorf("expected %s, got %q", what, got) }

func text(v string) (string, error) { return v, nil }

// accessLogFields parses an access-log mapping (accesslog.ParseMapping).
func accessLogFields(v string) (accesslog.Mapping, error) {
	m, err := accesslog.ParseMapping(v)
	if err != nil {
		return m, fmt.Errorf("%w, in %q", err, v)
	}
	return m, nil
}

// list splits a comma-separated value, dropping empty items.
func list(v string) []string {
	var out []string
	for _, part := range strings.Split(v, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

func positiveDuration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, expected("a positive duration such as 50ms or 10s", v)
	}
	return d, nil
}

// durationOrZero is positiveDuration accepting 0 (off).
func durationOrZero(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, expected("a duration such as 0, 200us or 1ms", v)
	}
	return d, nil
}

// durationAtLeast parses a duration no shorter than lo.
func durationAtLeast(lo time.Duration, example string) func(string) (time.Duration, error) {
	return func(v string) (time.Duration, error) {
		d, err := time.ParseDuration(v)
		if err != nil || d < lo {
			return 0, expected(fmt.Sprintf("a duration of at least %s such as %s", lo, example), v)
		}
		return d, nil
	}
}

func intBetween(lo, hi int) func(string) (int, error) {
	return func(v string) (int, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			return 0, expected(fmt.Sprintf("an integer between %d and %d", lo, hi), v)
		}
		return n, nil
	}
}

func positiveInt64(what string) func(string) (int64, error) {
	return func(v string) (int64, error) {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return 0, expected(what, v)
		}
		return n, nil
	}
}

// intOneOf parses an integer that must be one of allowed.
func intOneOf(allowed ...int) func(string) (int, error) {
	words := make([]string, len(allowed))
	for i, a := range allowed {
		words[i] = strconv.Itoa(a)
	}
	what := strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
	return func(v string) (int, error) {
		n, err := strconv.Atoi(v)
		for _, a := range allowed {
			if err == nil && n == a {
				return n, nil
			}
		}
		return 0, expected(what, v)
	}
}

func boolean(v string) (bool, error) {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, expected("true or false", v)
	}
	return b, nil
}

func oneOf(allowed ...string) func(string) (string, error) {
	return func(v string) (string, error) {
		for _, a := range allowed {
			if v == a {
				return v, nil
			}
		}
		return "", expected("one of "+strings.Join(allowed, ", "), v)
	}
}

// hostPorts parses a comma-separated list of host:port; empty: none.
func hostPorts(v string) ([]string, error) {
	addrs := list(v)
	for _, a := range addrs {
		if !validHostPort(a, true) {
			return addrs, expected("a comma-separated list of host:port", a)
		}
	}
	return addrs, nil
}

// listenAddr parses the address of a listener: host:port or :port.
func listenAddr(v string) (string, error) {
	if !validHostPort(v, false) {
		return v, expected("host:port or :port", v)
	}
	return v, nil
}

// optionalListenAddr is listenAddr or empty (no listener).
func optionalListenAddr(v string) (string, error) {
	if v == "" {
		return "", nil
	}
	return listenAddr(v)
}

// grpcListenAddr is listenAddr or off (no listener, returned as "").
func grpcListenAddr(v string) (string, error) {
	switch {
	case v == "off":
		return "", nil
	case !validHostPort(v, false):
		return v, expected("host:port, :port or off", v)
	}
	return v, nil
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

// prefixes parses a comma-separated list of IP addresses and CIDR
// prefixes, IPv4-mapped forms reduced to IPv4.
func prefixes(v string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, raw := range list(v) {
		p, err := ipprefix.Parse(raw)
		if err != nil {
			return out, expected("a comma-separated list of IP addresses or CIDR prefixes", raw)
		}
		out = append(out, p)
	}
	return out, nil
}

// readableDir parses an optional directory: empty means none; when set it
// must be a directory that can be listed, checked now so that a wrong path
// stops the process at start.
func readableDir(v string) (string, error) {
	if v == "" {
		return "", nil
	}
	info, err := os.Stat(v)
	switch {
	case err != nil:
		return v, err
	case !info.IsDir():
		return v, expected("a readable directory", v)
	}
	if _, err := os.ReadDir(v); err != nil {
		return v, err
	}
	return v, nil
}

// instanceID checks INSTANCE_ID against the bound of the instance field of
// decision events: the detector and the archiver refuse a longer one.
func instanceID(v string) (string, error) {
	if len(v) > event.MaxName || !utf8.ValidString(v) {
		return v, expected(fmt.Sprintf("valid UTF-8 of at most %d bytes", event.MaxName), v[:min(len(v), 64)]+"...")
	}
	return v, nil
}

// headerName parses an HTTP header name (a token of RFC 9110: letters,
// digits and !#$%&'*+-.^_`|~).
func headerName(v string) (string, error) {
	ok := v != "" && len(v) <= 128
	for i := 0; ok && i < len(v); i++ {
		c := v[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
	}
	if !ok {
		return v, expected("an HTTP header name (at most 128 letters, digits or !#$%&'*+-.^_`|~)", v)
	}
	return v, nil
}

// descriptorKey parses a key of Envoy's rate limit descriptors.
func descriptorKey(v string) (string, error) {
	if v == "" || len(v) > 256 || strings.ContainsFunc(v, func(c rune) bool { return c < 0x20 || c == 0x7f }) {
		return v, expected("a descriptor key (1 to 256 bytes, no control characters)", v)
	}
	return v, nil
}
