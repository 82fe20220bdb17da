package rlsapi_test

import (
	"fmt"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratewarden/ratewarden/internal/rlsapi"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// TestAddressEntriesGroupedAsIP checks that the address entry of a
// descriptor is counted as the ip dimension counts a client: the addresses
// of one IPv6 /64 share one budget (rotating among them earns nothing),
// another /64 has its own, IPv4 addresses are never grouped and an
// IPv4-mapped address is its IPv4 client; a rule's ipv6_prefix changes the
// grouping. Over gRPC and POST /json alike, and events keep the address.
func TestAddressEntriesGroupedAsIP(t *testing.T) {
	login := func(id string, prefix int) rules.Rule {
		r := rule(id, id, 5, time.Hour, "generic_key", "login", "remote_address", "")
		r.IPv6Prefix = prefix
		return r
	}
	e := newEnv(t, []rules.Rule{login("default", 0), login("per56", 56), login("ungrouped", 128)}, options{})
	call := func(domain, addr string) rlsv3.RateLimitResponse_Code {
		t.Helper()
		return e.mustCall(request(domain, desc("generic_key", "login", "remote_address", addr))).OverallCode
	}
	admitted := func(domain string, addrs ...string) int {
		t.Helper()
		n := 0
		for _, a := range addrs {
			if call(domain, a) == ok {
				n++
			}
		}
		return n
	}
	rotate := func(format string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf(format, i+1)
		}
		return out
	}

	if got := admitted("default", rotate("2001:db8:1:2::%x", 10)...); got != 5 {
		t.Errorf("ten addresses of one /64: %d admitted, want 5", got)
	}
	if ev := e.events.last(t); ev.IP != "2001:db8:1:2::a" {
		t.Errorf("event ip %q, want the full address 2001:db8:1:2::a", ev.IP)
	}
	if got := admitted("default", "2001:db8:1:3::1"); got != 1 {
		t.Errorf("another /64: %d admitted, want 1", got)
	}
	if got := admitted("default", rotate("192.0.2.%d", 10)...); got != 10 {
		t.Errorf("ten IPv4 addresses: %d admitted, want 10 (IPv4 is never grouped)", got)
	}
	plain, mapped := "198.51.100.7", "::ffff:198.51.100.7"
	if got := admitted("default", plain, plain, plain, mapped, mapped, mapped); got != 5 {
		t.Errorf("one IPv4 address, plain and IPv4-mapped: %d admitted, want 5", got)
	}
	// Two IPv4 clients behind an IPv4/IPv6 translator (64:ff9b::/96): two
	// budgets, not one /64's; and one of them counts as its IPv4 address.
	if got := admitted("default", rotate("64:ff9b::c000:2%02x", 10)...); got != 10 {
		t.Errorf("ten IPv4 clients through a translator: %d admitted, want 10", got)
	}
	if got := admitted("default", "192.0.2.200", "64:ff9b::c000:2c8", "192.0.2.200", "64:ff9b::c000:2c8", "192.0.2.200", "64:ff9b::c000:2c8"); got != 5 {
		t.Errorf("one IPv4 address, plain and translated: %d admitted, want 5", got)
	}
	if got := admitted("per56", rotate("2001:db8:1:%x::1", 10)...); got != 5 {
		t.Errorf("ipv6_prefix 56, ten /64s of one /56: %d admitted, want 5", got)
	}
	if got := admitted("ungrouped", rotate("2001:db8:1:2::%x", 10)...); got != 10 {
		t.Errorf("ipv6_prefix 128: %d admitted, want 10", got)
	}

	// POST /json: the same budget as gRPC, the same grouping.
	body := func(addr string) string {
		return `{"domain":"default","descriptors":[{"entries":[{"key":"generic_key","value":"login"},{"key":"remote_address","value":"` + addr + `"}]}]}`
	}
	if status, b := e.postJSON(body("2001:db8:1:2::ffff")); status != 429 {
		t.Errorf("/json from a /64 already over its limit: %d %s, want 429", status, b)
	}
	if status, b := e.postJSON(body("2001:db8:1:4::1")); status != 200 {
		t.Errorf("/json from a fresh /64: %d %s, want 200", status, b)
	}
}

// TestAddressKeyIsConfigurable checks that the grouping follows
// Config.AddressKey (RLS_ADDRESS_KEY), not the default key name.
func TestAddressKeyIsConfigurable(t *testing.T) {
	e := newEnv(t, []rules.Rule{rule("c", "c", 2, time.Hour, "client", ""), rule("r", "r", 2, time.Hour, "remote_address", "")},
		options{cfg: rlsapi.Config{AddressKey: "client"}})
	count := func(domain, key string) (n int) {
		for i := range 4 {
			if e.mustCall(request(domain, desc(key, fmt.Sprintf("2001:db8::%d", i+1)))).OverallCode == ok {
				n++
			}
		}
		return n
	}
	if got := count("c", "client"); got != 2 {
		t.Errorf("address key client, four addresses of one /64: %d admitted, want 2", got)
	}
	if got := count("r", "remote_address"); got != 4 {
		t.Errorf("remote_address when it is not the address key: %d admitted, want 4 (its values are not addresses to the rules)", got)
	}
}
