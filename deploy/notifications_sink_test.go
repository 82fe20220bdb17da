// The webhook and Slack endpoint of TestNotificationRedisFallback.

package deploy_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testkit"
)

// ntfMessage is Alertmanager's webhook payload (version 4), in part.
type ntfMessage struct {
	Receiver string     `json:"receiver"`
	Status   string     `json:"status"`
	Alerts   []ntfAlert `json:"alerts"`
}

type ntfAlert struct {
	Status      string            `json:"status"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// ntfSlack is a Slack incoming-webhook message, in part.
type ntfSlack struct {
	Channel     string `json:"channel"`
	Attachments []struct {
		Title string `json:"title"`
		Text  string `json:"text"`
		Color string `json:"color"`
	} `json:"attachments"`
}

// has reports whether an attachment has the title, the colour and text
// containing text.
func (s ntfSlack) has(title, color, text string) bool {
	for _, a := range s.Attachments {
		if a.Title == title && a.Color == color && strings.Contains(a.Text, text) {
			return true
		}
	}
	return false
}

// ntfSink is the webhook and Slack endpoint Alertmanager notifies. The
// webhook's requests must carry the bearer token Alertmanager reads from
// its file; one without is refused and counted.
type ntfSink struct {
	url, token string
	mu         sync.Mutex
	webhook    []ntfMessage
	slack      []ntfSlack
	refused    int
}

func ntfStartSink(t *testing.T) *ntfSink {
	t.Helper()
	s := &ntfSink{token: "notify-test-" + strconv.FormatInt(time.Now().UnixNano(), 36)}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

func (s *ntfSink) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.URL.Path {
	case "/webhook":
		if r.Header.Get("Authorization") != "Bearer "+s.token {
			s.refused++
			http.Error(w, "no bearer token", http.StatusUnauthorized)
			return
		}
		var m ntfMessage
		if err := json.Unmarshal(body, &m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.webhook = append(s.webhook, m)
	case "/slack":
		var m ntfSlack
		if err := json.Unmarshal(body, &m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.slack = append(s.slack, m)
	default:
		http.NotFound(w, r)
		return
	}
	_, _ = io.WriteString(w, "ok")
}

// ntfReceived is a webhook message and the alert of it a wait matched.
type ntfReceived struct {
	msg   ntfMessage
	alert ntfAlert
}

// waitWebhook waits for a webhook message with an alert matching.
func (s *ntfSink) waitWebhook(t *testing.T, what string, match func(ntfMessage, ntfAlert) bool) ntfReceived {
	t.Helper()
	var got ntfReceived
	s.wait(t, what, func() bool {
		for _, m := range s.webhook {
			for _, a := range m.Alerts {
				if match(m, a) {
					got = ntfReceived{m, a}
					return true
				}
			}
		}
		return false
	})
	return got
}

// waitSlack waits for a Slack message matching.
func (s *ntfSink) waitSlack(t *testing.T, what string, match func(ntfSlack) bool) {
	t.Helper()
	s.wait(t, what, func() bool {
		for _, m := range s.slack {
			if match(m) {
				return true
			}
		}
		return false
	})
}

// log writes the notifications received, one line each.
func (s *ntfSink) log(t *testing.T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.webhook {
		for _, a := range m.Alerts {
			t.Logf("webhook: receiver %s, %s %s severity=%s", m.Receiver, a.Status, a.Labels["alertname"], a.Labels["severity"])
		}
	}
	for _, m := range s.slack {
		for _, a := range m.Attachments {
			t.Logf("slack %s: %s", m.Channel, a.Title)
		}
	}
	if s.refused > 0 {
		t.Logf("webhook requests refused (no token): %d", s.refused)
	}
}

func (s *ntfSink) wait(t *testing.T, what string, found func() bool) {
	t.Helper()
	defer func() {
		if t.Failed() {
			s.log(t)
		}
	}()
	testkit.WaitFor(t, ntfDeadline, what, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return found()
	})
}
