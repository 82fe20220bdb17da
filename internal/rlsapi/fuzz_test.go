package rlsapi_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/rlsapi"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// boundsChecker admits everything and fails the fuzz run when a request
// that passed the API's checks breaks the bounds the engine relies on.
type boundsChecker struct{ t *testing.T }

func (c boundsChecker) CheckDescriptors(_ context.Context, req *rules.DescriptorRequest, d *limiter.Decision) {
	d.Reset()
	d.Allowed, d.Reason = true, event.ReasonNoRule
	if req.Domain == "" || len(req.Domain) > event.MaxDomain || len(req.Descriptors) == 0 || len(req.Descriptors) > event.MaxDescriptors {
		c.t.Fatalf("domain %q with %d descriptors passed the checks", req.Domain, len(req.Descriptors))
	}
	for _, desc := range req.Descriptors {
		if len(desc.Entries) == 0 || len(desc.Entries) > event.MaxEntries || desc.Cost < 0 {
			c.t.Fatalf("descriptor %+v passed the checks", desc)
		}
		for _, e := range desc.Entries {
			if e.Key == "" || !event.ValidDescriptorText(e.Key, event.MaxDescriptorKey) || !event.ValidDescriptorText(e.Value, event.MaxDescriptorValue) {
				c.t.Fatalf("entry %q=%q passed the checks", e.Key, e.Value)
			}
		}
	}
	if req.Endpoint == "" || req.Endpoint[0] != '/' {
		c.t.Fatalf("endpoint %q", req.Endpoint)
	}
}

// Whatever the body of POST /json, the answer is one of its statuses and
// what reaches the engine is within the bounds.
func FuzzJSONRequest(f *testing.F) {
	f.Add([]byte(`{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"203.0.113.7"}]}]}`))
	f.Add([]byte(`{"domain":"edge","hitsAddend":3,"descriptors":[{"entries":[{"key":"path","value":"/a/../b"}],"hitsAddend":0}]}`))
	f.Add([]byte(`{"domain":"","descriptors":[]}`))
	f.Add([]byte(`{"domain":"d","descriptors":[{"entries":[{"key":"","value":"x"}]}]}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, body []byte) {
		srv := rlsapi.New(rlsapi.Config{}, boundsChecker{t}, zap.NewNop(), prometheus.NewRegistry())
		switch code, answer := srv.AnswerJSON(context.Background(), body); code {
		case http.StatusOK, http.StatusBadRequest:
		default:
			t.Fatalf("status %d for %q: %s", code, body, answer)
		}
	})
}
