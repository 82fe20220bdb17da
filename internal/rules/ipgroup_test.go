package rules

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

func TestIPSubject(t *testing.T) {
	tests := []struct {
		name string
		ip   string
		bits int
		want string
	}{
		{"ipv4 unchanged", "203.0.113.7", 64, "203.0.113.7"},
		{"ipv4 ignores the ipv6 grouping", "203.0.113.7", 32, "203.0.113.7"},
		{"ipv4-mapped is ipv4", "::ffff:203.0.113.7", 64, "203.0.113.7"},
		{"ipv6 by its /64", "2001:db8:1:2:3:4:5:6", 64, "2001:db8:1:2::/64"},
		{"ipv6 default is /64", "2001:db8:1:2:3:4:5:6", 0, "2001:db8:1:2::/64"},
		{"ipv6 /48", "2001:db8:1:2:3:4:5:6", 48, "2001:db8:1::/48"},
		{"ipv6 /56 masks inside a group", "2001:db8:1:2ff:3:4:5:6", 56, "2001:db8:1:200::/56"},
		{"ipv6 /128 is the address", "2001:db8:1:2:3:4:5:6", 128, "2001:db8:1:2:3:4:5:6"},
		{"ipv6 /127", "2001:db8::3", 127, "2001:db8::2/127"},
		{"ipv6 written upper-case", "2001:DB8:0:0:0:0:0:1", 64, "2001:db8::/64"},
		{"ipv6 zone dropped", "fe80::1%eth0", 64, "fe80::/64"},
		{"ipv6 zone dropped at 128", "fe80::1%eth0", 128, "fe80::1"},
		{"loopback", "::1", 64, "::/64"},
		{"out of range means no grouping", "2001:db8::1", 129, "2001:db8::1"},
		{"negative means no grouping", "2001:db8::1", -1, "2001:db8::1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := IPSubject(netip.MustParseAddr(tt.ip), tt.bits); got != tt.want {
				t.Errorf("IPSubject(%s, %d) = %q, want %q", tt.ip, tt.bits, got, tt.want)
			}
			if got := IPSubjectOf(tt.ip, tt.bits); got != tt.want {
				t.Errorf("IPSubjectOf(%q, %d) = %q, want %q", tt.ip, tt.bits, got, tt.want)
			}
		})
	}
	if got := IPSubject(netip.Addr{}, 64); got != "" {
		t.Errorf("IPSubject(invalid) = %q, want empty", got)
	}
	for _, s := range []string{"", "u-42", "2001:db8::/64", "203.0.113.0/24", "999.1.1.1"} {
		if got := IPSubjectOf(s, 64); got != s {
			t.Errorf("IPSubjectOf(%q) = %q, want it unchanged", s, got)
		}
	}
}

func TestIPNetwork(t *testing.T) {
	tests := []struct {
		ip         string
		ipv4, ipv6 int
		want       string
	}{
		{"203.0.113.7", 32, 48, "203.0.113.7/32"},
		{"203.0.113.7", 24, 48, "203.0.113.0/24"},
		{"::ffff:203.0.113.7", 24, 48, "203.0.113.0/24"},
		{"2001:db8:1:2:3:4:5:6", 32, 48, "2001:db8:1::/48"},
		{"2001:db8:1:1ff::1", 32, 56, "2001:db8:1:100::/56"},
		{"fe80::1%eth0", 32, 64, "fe80::/64"},
		{"2001:db8::1", 32, 129, "2001:db8::1/128"},
		{"u-42", 32, 48, "u-42"},
	}
	for _, tt := range tests {
		if got := IPNetwork(tt.ip, tt.ipv4, tt.ipv6); got != tt.want {
			t.Errorf("IPNetwork(%q, %d, %d) = %q, want %q", tt.ip, tt.ipv4, tt.ipv6, got, tt.want)
		}
	}
	// The 11 /64s of one /56 are one /48.
	seen := map[string]bool{}
	for i := range 11 {
		seen[IPNetwork(fmt.Sprintf("2001:db8:1:%x::1", 0x100+i), 32, 48)] = true
	}
	if len(seen) != 1 {
		t.Errorf("networks of 11 /64s of one /56: %v", seen)
	}
}

// Two addresses of one /64 share a subject; the next /64 does not.
func TestIPSubjectGroupsOnePrefix(t *testing.T) {
	a := IPSubjectOf("2001:db8:5:6::1", 64)
	b := IPSubjectOf("2001:db8:5:6:ffff:ffff:ffff:ffff", 64)
	c := IPSubjectOf("2001:db8:5:7::1", 64)
	if a != b || a == c {
		t.Fatalf("subjects %q, %q, %q: want the first two equal and the third apart", a, b, c)
	}
}

func TestIPPrefixDoesNotAllocate(t *testing.T) {
	v4, v6 := netip.MustParseAddr("203.0.113.7"), netip.MustParseAddr("2001:db8::1")
	if n := testing.AllocsPerRun(100, func() { IPPrefix(v4, 64); IPPrefix(v6, 64) }); n != 0 {
		t.Errorf("IPPrefix allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() { IPSubjectOf("203.0.113.7", 64); IPSubjectOf("2001:db8::1", 128) }); n != 0 {
		t.Errorf("IPSubjectOf of an ungrouped address allocates %v times", n)
	}
}

func TestParseIPSubject(t *testing.T) {
	tests := []struct {
		in   string
		want string // "" for refused
	}{
		{"203.0.113.7", "203.0.113.7/32"},
		{"::ffff:203.0.113.7", "203.0.113.7/32"},
		{"2001:db8::1", "2001:db8::1/128"},
		{"2001:db8:1:2::/64", "2001:db8:1:2::/64"},
		{"2001:db8:1:2::9/64", "2001:db8:1:2::/64"},
		{"2001:db8::1/128", "2001:db8::1/128"},
		{"203.0.113.0/24", ""},
		{"::ffff:203.0.113.0/120", ""},
		{"fe80::1%eth0", ""},
		{"2001:db8::/129", ""},
		{"u-42", ""},
		{"", ""},
	}
	for _, tt := range tests {
		p, ok := ParseIPSubject(tt.in)
		got := ""
		if ok {
			got = p.String()
		}
		if got != tt.want {
			t.Errorf("ParseIPSubject(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// FuzzIPSubjectOf: never panics; idempotent; IPv4 and, at 128, IPv6
// addresses in canonical form come back unchanged; an IPv6 subject is a
// prefix that ParseIPSubject reads back and that contains the address.
func FuzzIPSubjectOf(f *testing.F) {
	for _, s := range []string{"203.0.113.7", "2001:db8::1", "::ffff:1.2.3.4", "fe80::1%eth0", "2001:db8::/64", "x", ""} {
		for _, bits := range []int{0, 1, 32, 48, 64, 127, 128, 129, -5} {
			f.Add(s, bits)
		}
	}
	f.Fuzz(func(t *testing.T, ip string, bits int) {
		got := IPSubjectOf(ip, bits)
		if again := IPSubjectOf(got, bits); again != got {
			t.Fatalf("IPSubjectOf(%q, %d) = %q, then %q", ip, bits, got, again)
		}
		a, err := netip.ParseAddr(ip)
		if err != nil {
			if got != ip {
				t.Fatalf("non-address %q became %q", ip, got)
			}
			return
		}
		canonical := a.String() == ip && a.Zone() == ""
		switch {
		case a.Is4() && canonical && got != ip:
			t.Fatalf("IPv4 %q became %q", ip, got)
		case (bits == 128 || bits > 128 || bits < 0) && canonical && !a.Is4In6() && got != ip:
			t.Fatalf("%q at %d became %q", ip, bits, got)
		}
		p, ok := ParseIPSubject(got)
		if !ok || !p.Contains(a.Unmap().WithZone("")) {
			t.Fatalf("subject %q of %q: parsed %v, %v", got, ip, p, ok)
		}
		if strings.Contains(got, "/") && IPPrefix(a, bits) != p {
			t.Fatalf("subject %q of %q is not IPPrefix %v", got, ip, IPPrefix(a, bits))
		}
	})
}
