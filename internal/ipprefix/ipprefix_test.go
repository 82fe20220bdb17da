package ipprefix

import "testing"

func TestParse(t *testing.T) {
	tests := []struct{ in, want string }{
		{"192.0.2.1", "192.0.2.1/32"},
		{"2001:db8::1", "2001:db8::1/128"},
		{"::ffff:192.0.2.1", "192.0.2.1/32"},
		{"10.1.2.3/8", "10.0.0.0/8"},
		{"::ffff:10.0.0.0/104", "10.0.0.0/8"},
		{"2001:db8:1:2::7/64", "2001:db8:1:2::/64"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			p, err := Parse(tt.in)
			if err != nil || p.String() != tt.want {
				t.Fatalf("Parse(%q) = %v, %v; want %s", tt.in, p, err, tt.want)
			}
		})
	}
	for _, bad := range []string{"", "10.0.0.0/33", "fe80::1%eth0", "example.com", "192.0.2.1; DROP"} {
		if p, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", bad, p)
		}
	}
}
