package ipprefix

import (
	"net/netip"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct{ in, want string }{
		{"192.0.2.1", "192.0.2.1/32"},
		{"2001:db8::1", "2001:db8::1/128"},
		{"::ffff:192.0.2.1", "192.0.2.1/32"},
		{"10.1.2.3/8", "10.0.0.0/8"},
		{"::ffff:10.0.0.0/104", "10.0.0.0/8"},
		{"2001:db8:1:2::7/64", "2001:db8:1:2::/64"},
		{"64:ff9b::192.0.2.1", "192.0.2.1/32"},
		{"64:ff9b::10.0.0.0/104", "10.0.0.0/8"},
		{"64:ff9b::/96", "0.0.0.0/0"},
		{"64:ff9b::/64", "64:ff9b::/64"},
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

func TestClient(t *testing.T) {
	tests := []struct{ in, want string }{
		{"192.0.2.1", "192.0.2.1"},
		{"::ffff:192.0.2.1", "192.0.2.1"},
		{"64:ff9b::cb00:7104", "203.0.113.4"},
		{"64:ff9b::102:304", "1.2.3.4"},
		{"64:ff9b:1::102:304", "64:ff9b:1::102:304"}, // the local-use prefix: no fixed layout
		{"2001:db8::1", "2001:db8::1"},
		{"fe80::1%eth0", "fe80::1"},
	}
	for _, tt := range tests {
		if got := Client(netip.MustParseAddr(tt.in)); got.String() != tt.want {
			t.Errorf("Client(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { Client(netip.MustParseAddr("64:ff9b::cb00:7104")) }); n != 0 {
		t.Errorf("Client allocates %v times", n)
	}
}
