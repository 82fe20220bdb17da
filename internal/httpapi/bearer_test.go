package httpapi

import (
	"net/http/httptest"
	"testing"
)

func TestBearerTokens(t *testing.T) {
	const a, b = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	tokens := newBearerTokens(a, b)
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
			r := httptest.NewRequest("GET", "/", nil)
			if tt.header != "" {
				r.Header.Set("Authorization", tt.header)
			}
			if got := tokens.allows(r); got != tt.want {
				t.Fatalf("allows(%q) = %v, want %v", tt.header, got, tt.want)
			}
		})
	}
	if newBearerTokens().allows(httptest.NewRequest("GET", "/", nil)) {
		t.Fatal("no tokens allowed a request without one")
	}
}
