package ops

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
)

func get(t *testing.T, h http.Handler, method, path string) (int, string) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
	return w.Code, w.Body.String()
}

func TestReadyz(t *testing.T) {
	refused := func(context.Context) error { return syscall.ECONNREFUSED }
	up := func(context.Context) error { return nil }
	tests := []struct {
		name     string
		probes   []Probe
		details  func() map[string]string
		wantCode int
		wantBody string
	}{
		{"all up", []Probe{{Name: "redis", Required: true, Check: up}, {Name: "kafka", Check: up}}, nil,
			200, `{"status":"ready","checks":{"kafka":"up","redis":"up"}}`},
		{"an optional probe down", []Probe{{Name: "redis", Check: refused}, {Name: "kafka", Required: true, Check: up}}, nil,
			200, `{"status":"ready","checks":{"kafka":"up","redis":"down: connection refused"}}`},
		{"a required probe down", []Probe{{Name: "postgres", Required: true, Check: refused}}, nil,
			503, `{"status":"unready","checks":{"postgres":"down: connection refused"}}`},
		{"details between status and checks", []Probe{{Name: "redis", Check: up}},
			func() map[string]string { return map[string]string{"mode": "local", "b": "\"q\""} },
			200, `{"status":"ready","b":"\"q\"","mode":"local","checks":{"redis":"up"}}`},
		{"no probes", nil, nil, 200, `{"status":"ready","checks":{}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := get(t, NewHandler(Config{Probes: tt.probes, Details: tt.details}), "GET", "/readyz")
			if code != tt.wantCode || body != tt.wantBody+"\n" {
				t.Fatalf("/readyz: %d %s, want %d %s", code, body, tt.wantCode, tt.wantBody)
			}
			if !json.Valid([]byte(body)) {
				t.Fatalf("/readyz body is not JSON: %s", body)
			}
		})
	}
}

// The routes of each handler, and who answers on a listener shared with
// the API.
func TestRoutes(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "metrics") })
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "api "+r.URL.Path) })
	plain := NewHandler(Config{Metrics: metrics})
	profiled := NewHandler(Config{Metrics: metrics, Profiles: true})
	tests := []struct {
		name     string
		h        http.Handler
		method   string
		path     string
		wantCode int
		wantBody string // prefix
	}{
		{"healthz", plain, "GET", "/healthz", 200, `{"status":"ok"}`},
		{"metrics", plain, "GET", "/metrics", 200, "metrics"},
		{"no profiles unless asked", plain, "GET", "/debug/pprof/", 404, ""},
		{"profiles", profiled, "GET", "/debug/pprof/cmdline", 200, ""},
		{"post to healthz", plain, "POST", "/healthz", 405, ""},
		{"beside: ops route", Beside(api, plain), "GET", "/metrics", 200, "metrics"},
		{"beside: API route", Beside(api, plain), "POST", "/v1/check", 200, "api /v1/check"},
		{"beside: unclean path reaches the API as sent", Beside(api, plain), "GET", "/v1/auth//a/../b", 200, "api /v1/auth//a/../b"},
		{"beside: profiles off", Beside(api, plain), "GET", "/debug/pprof/", 404, ""},
		{"healthz only: healthz", WithHealthz(api), "GET", "/healthz", 200, `{"status":"ok"}`},
		{"healthz only: metrics is the API's", WithHealthz(api), "GET", "/metrics", 200, "api /metrics"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := get(t, tt.h, tt.method, tt.path)
			if code != tt.wantCode || !strings.HasPrefix(body, tt.wantBody) {
				t.Fatalf("%s %s: %d %q, want %d %q", tt.method, tt.path, code, body, tt.wantCode, tt.wantBody)
			}
		})
	}
}

func TestProfileHandlerServesProfiles(t *testing.T) {
	srv := httptest.NewServer(ProfileHandler())
	defer srv.Close()
	for path, want := range map[string]string{
		"/debug/pprof/":                  "goroutine",
		"/debug/pprof/heap?debug=1":      "heap profile",
		"/debug/pprof/allocs?debug=1":    "heap profile",
		"/debug/pprof/cmdline":           "ops.test",
		"/debug/pprof/goroutine?debug=1": "goroutine profile",
	} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("GET %s: %d, body without %q", path, resp.StatusCode, want)
		}
	}
}
