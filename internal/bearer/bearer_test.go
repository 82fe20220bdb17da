package bearer

import (
	"net/http/httptest"
	"testing"
)

func TestTokens(t *testing.T) {
	const a, b = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	tokens := New(a, b)
	tests := []struct {
		name, header string
		want         bool
	}{
		{"first token", "Bearer " + a, true},
		{"second token", "Bearer " + b, true},
		{"scheme in another case", "bearer " + a, true},
		{"no header", "", false},
		{"no scheme", a, false},
		{"basic scheme", "Basic " + a, false},
		{"wrong token", "Bearer " + a[:31] + "0", false},
		{"prefix of a token", "Bearer " + a[:16], false},
		{"token and more", "Bearer " + a + "x", false},
		{"both tokens", "Bearer " + a + "," + b, false},
		{"empty token", "Bearer ", false},
		{"two spaces", "Bearer  " + a, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tokens.Allows(tt.header); got != tt.want {
				t.Fatalf("Allows(%q) = %v, want %v", tt.header, got, tt.want)
			}
			if got := tokens.AllowsBytes([]byte(tt.header)); got != tt.want {
				t.Fatalf("AllowsBytes(%q) = %v, want %v", tt.header, got, tt.want)
			}
			r := httptest.NewRequest("GET", "/", nil)
			if tt.header != "" {
				r.Header.Set("Authorization", tt.header)
			}
			if got := tokens.AllowsRequest(r); got != tt.want {
				t.Fatalf("AllowsRequest(Authorization: %q) = %v, want %v", tt.header, got, tt.want)
			}
		})
	}
	if New().AllowsRequest(httptest.NewRequest("GET", "/", nil)) {
		t.Fatal("no tokens allowed a request without one")
	}
	if New().Allows("Bearer ") {
		t.Fatal("no tokens allowed an empty token")
	}
}
