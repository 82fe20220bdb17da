package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// With -after-ban, loginsim makes only the attackers' attempts after the
// scenario and prints, by actor, what the limiter answered them: here a
// limiter that refuses every address as banned, and never gets a report.
// It serves no batch route, as a limiter older than batches: the client's
// concurrent checks are then sent one by one.
func TestAfterBan(t *testing.T) {
	var checks, others atomic.Int64
	limiter := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/check" {
			if r.URL.Path != "/v1/check/batch" { // refused as by a limiter without batches: the client sends checks apart
				others.Add(1)
			}
			http.NotFound(w, r)
			return
		}
		checks.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"allowed":false,"reason":"banned","retry_after_ms":1000}`))
	}))
	defer limiter.Close()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"-url", limiter.URL, "-bots", "4", "-attack-sources", "3",
		"-after-ban", "2", "-retry-every", "1ms"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	for _, want := range []string{
		"loginsim: 7 attacking addresses try again",
		"account_attack: 3 of 3 addresses refused as banned, then 6 of 6 attempts after the ban refused (before it: 0 attempts answered otherwise)\n",
		"stuffing: 4 of 4 addresses refused as banned, then 8 of 8 attempts after the ban refused (before it: 0 attempts answered otherwise)\n",
	} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, stdout.String())
		}
	}
	if strings.Contains(stdout.String(), "normal") || checks.Load() != 7*3 || others.Load() != 0 {
		t.Errorf("%d checks (want 21: each address once, then twice after its ban), %d other requests, output:\n%s",
			checks.Load(), others.Load(), stdout.String())
	}
}
