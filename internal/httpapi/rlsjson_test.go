package httpapi_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
)

// recordedJSON is a Config.AnswerJSON that records the bodies it is given
// and answers each with a fixed status and answer.
type recordedJSON struct {
	mu     sync.Mutex
	bodies []string
}

const jsonAnswer = `{"overallCode":"OVER_LIMIT"}` + "\n"

func (r *recordedJSON) answer(_ context.Context, body []byte) (int, []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bodies = append(r.bodies, string(body))
	return http.StatusTooManyRequests, []byte(jsonAnswer)
}

// POST /json is served on the decision port's fasthttp server behind the
// API tokens: the body goes to Config.AnswerJSON as sent, its status and
// answer come back as JSON; another method is 405, a missing token 401,
// and neither reaches AnswerJSON. Without AnswerJSON the route is not
// served.
func TestJSONRoute(t *testing.T) {
	rec := new(recordedJSON)
	s := newFixedStack(t, stackOptions{rules: ruleFor("token_bucket", "[{rate: 1000, per: 1s, burst: 1000}]"),
		configure: func(c *stackConfig) {
			c.APITokens = []string{apiTokenA}
			c.AnswerJSON = rec.answer
		}})
	const body = `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"198.51.100.1"}]}]}`
	token := map[string]string{"Authorization": "Bearer " + apiTokenA}

	resp, raw := s.send(http.MethodPost, "/json", body, token)
	if resp.StatusCode != http.StatusTooManyRequests || string(raw) != jsonAnswer ||
		resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("POST /json: %d %q %v; want AnswerJSON's 429 and answer as JSON", resp.StatusCode, raw, resp.Header)
	}
	if r := s.do(http.MethodPost, "/json", body, nil); r.Status != http.StatusUnauthorized || r.Header.Get("WWW-Authenticate") == "" {
		t.Fatalf("POST /json without a token: %d %v, want 401 with a challenge", r.Status, r.Header)
	}
	if r := s.do(http.MethodGet, "/json", "", token); r.Status != http.StatusMethodNotAllowed || r.Header.Get("Allow") != http.MethodPost {
		t.Fatalf("GET /json: %d %v, want 405 allowing POST", r.Status, r.Header)
	}
	rec.mu.Lock()
	if len(rec.bodies) != 1 || rec.bodies[0] != body {
		t.Fatalf("AnswerJSON was given %q, want the one authorized POST's body", rec.bodies)
	}
	rec.mu.Unlock()

	plain := newFixedStack(t, stackOptions{rules: ruleFor("token_bucket", "[{rate: 1000, per: 1s, burst: 1000}]")})
	if r := plain.do(http.MethodPost, "/json", body, nil); r.Status != http.StatusNotFound {
		t.Fatalf("POST /json without AnswerJSON: %d, want 404", r.Status)
	}
}
