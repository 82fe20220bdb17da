package console

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestSameOrigin(t *testing.T) {
	tests := []struct {
		name, method, site, origin string
		want                       bool
	}{
		{"a GET from anywhere", http.MethodGet, "cross-site", "http://evil.example", true},
		{"a form of the console", http.MethodPost, "same-origin", "http://console.example", true},
		{"an old browser, same origin", http.MethodPost, "", "http://console.example", true},
		{"no metadata at all (curl)", http.MethodPost, "", "", true},
		{"cross-site", http.MethodPost, "cross-site", "", false},
		{"same site, another origin", http.MethodPost, "same-site", "http://other.console.example", false},
		{"typed in the address bar", http.MethodPost, "none", "", false},
		{"another origin", http.MethodPost, "", "http://evil.example", false},
		{"opaque origin", http.MethodPost, "", "null", false},
		{"another port", http.MethodPost, "", "http://console.example:8443", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(tt.method, "http://console.example/bans", nil)
			if tt.site != "" {
				r.Header.Set("Sec-Fetch-Site", tt.site)
			}
			if tt.origin != "" {
				r.Header.Set("Origin", tt.origin)
			}
			if got := sameOrigin(r, ""); got != tt.want {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// Behind a proxy that rewrites Host, CONSOLE_PUBLIC_URL is the origin the
// console's forms come from: the request's Host no longer matters, the
// scheme does.
func TestSameOriginAsThePublicURL(t *testing.T) {
	const public = "https://console.example"
	for _, tt := range []struct {
		origin string
		want   bool
	}{
		{"https://console.example", true},
		{"https://Console.Example", true},
		{"http://console.example", false},
		{"https://127.0.0.1:8084", false},
		{"https://evil.example", false},
	} {
		r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:8084/bans", nil)
		r.Header.Set("Sec-Fetch-Site", "same-origin")
		r.Header.Set("Origin", tt.origin)
		if got := sameOrigin(r, public); got != tt.want {
			t.Errorf("Origin %s: %v, want %v", tt.origin, got, tt.want)
		}
	}
}

// Every answer, the login page and the stylesheet too, carries the strict
// policy and the other headers.
func TestSecurityHeaders(t *testing.T) {
	s := New(Config{Users: &Users{}})
	for _, path := range []string{"/login", "/static/console.css", "/bans", "/nope"} {
		w := httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		h := w.Header()
		if h.Get("Content-Security-Policy") != csp || h.Get("X-Frame-Options") != "DENY" || h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: headers %v", path, h)
		}
	}
}

// The login form keeps the browser's login token: a second GET /login (a
// second tab, a browser's stray request) does not void the first form.
func TestLoginTokenKept(t *testing.T) {
	s := New(Config{Users: &Users{}})
	w := httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/login", nil))
	first := w.Result().Cookies()
	if len(first) != 1 || !first[0].Secure || !first[0].HttpOnly || first[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("login cookie %+v", first)
	}
	r := httptest.NewRequest(http.MethodGet, "/login", nil)
	r.AddCookie(first[0])
	w = httptest.NewRecorder()
	s.ServeHTTP(w, r)
	if again := w.Result().Cookies(); len(again) != 1 || again[0].Value != first[0].Value {
		t.Fatalf("a second GET /login changed the token: %+v", again)
	}
}
