package adminapi

import (
	"slices"
	"strings"
	"testing"
)

func TestBanSubject(t *testing.T) {
	tests := []struct {
		scope, subject string
		bits           int
		want           string // "error: ..." for a 400 containing it
	}{
		{"ip", "203.0.113.7", 64, "203.0.113.7"},
		{"ip", "::ffff:203.0.113.7", 64, "203.0.113.7"},
		{"ip", "2001:db8:1:2::7", 64, "2001:db8:1:2::/64"},
		{"ip", "2001:DB8:1:2:0:0:0:7", 64, "2001:db8:1:2::/64"},
		{"ip", "fe80::1%eth0", 64, "fe80::/64"},
		{"ip", "2001:db8:1:2::7", 48, "2001:db8:1::/48"},
		{"ip", "2001:db8:1:2::7", 128, "2001:db8:1:2::7"},
		{"ip", "2001:db8:1:2::/64", 64, "2001:db8:1:2::/64"},
		{"ip", "2001:db8:1:2::7/64", 64, "2001:db8:1:2::/64"}, // host bits dropped
		{"ip", "2001:db8:1:2::7/128", 128, "2001:db8:1:2::7"},
		{"ip", "2001:db8:1::/48", 64, "error: subject: an IP address, or an IPv6 prefix of length 64 (detection.ipv6_prefix)"},
		{"ip", "2001:db8:1:2::/64", 48, "error: an IPv6 prefix of length 48"},
		{"ip", "203.0.113.0/24", 64, "error: subject: an IP address, or an IPv6 prefix"},
		{"ip", "::ffff:203.0.113.0/120", 64, "error: subject:"},
		{"ip", "u-42", 64, "error: subject:"},
		{"ip", "", 64, "error: subject: 1 to"},
		{"user", "2001:db8::/64", 64, "2001:db8::/64"},
		{"planet", "x", 64, "error: scope: ip or user"},
	}
	for _, tt := range tests {
		t.Run(tt.scope+" "+tt.subject, func(t *testing.T) {
			got, err := banSubject(tt.scope, tt.subject, tt.bits)
			if want, isErr := strings.CutPrefix(tt.want, "error: "); isErr {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("banSubject = %q, %v; want an error containing %q", got, err, want)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("banSubject = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestUnbanSubjects(t *testing.T) {
	tests := []struct {
		scope, subject string
		bits           int
		want           []string // nil: a 400
	}{
		{"ip", "203.0.113.7", 64, []string{"203.0.113.7"}},
		{"ip", "2001:db8:1:2::7", 64, []string{"2001:db8:1:2::/64", "2001:db8:1:2::7"}},
		{"ip", "2001:db8:1:2::7", 128, []string{"2001:db8:1:2::7"}},
		{"ip", "2001:db8:1:2::/64", 64, []string{"2001:db8:1:2::/64"}},
		{"ip", "2001:db8:1::/48", 64, []string{"2001:db8:1::/48"}}, // a ban of another grouping
		{"ip", "2001:db8:1:2::7/128", 64, []string{"2001:db8:1:2::7"}},
		{"ip", "2001:db8::/16", 64, nil},
		{"ip", "203.0.113.0/24", 64, nil},
		{"ip", "", 64, nil},
		{"user", "u-1", 64, []string{"u-1"}},
		{"planet", "u-1", 64, nil},
	}
	for _, tt := range tests {
		t.Run(tt.scope+" "+tt.subject, func(t *testing.T) {
			got, err := unbanSubjects(tt.scope, tt.subject, tt.bits)
			if (err != nil) != (tt.want == nil) || (err == nil && !slices.Equal(got, tt.want)) {
				t.Fatalf("unbanSubjects = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
