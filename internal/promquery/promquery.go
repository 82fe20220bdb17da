// Package promquery runs instant queries against Prometheus's HTTP API
// (GET /api/v1/query) for the console's figures that only the metrics hold:
// the requests each rule counted and the detector's lag.
//
// Prometheus's answer is read as untrusted input: the call is bounded in
// time, the body in size and the samples in number, and anything but a
// well-formed vector is an error, which the console shows as unavailable.
// Answers are reused for a few seconds, so many users' pages make one query.
package promquery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

const (
	// MaxBody bounds the bytes read of one answer.
	MaxBody = 1 << 20
	// MaxSamples bounds the samples of one answer: the console's queries
	// aggregate by rule or source, so a few hundred at most are expected.
	MaxSamples = 10_000
	// TTL is how long an answer, or a failure, is reused.
	TTL = 5 * time.Second
	// maxErrorText bounds Prometheus's error message kept in an error.
	maxErrorText = 200
)

// Sample is one series of an instant vector: its labels and value.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// Client queries one Prometheus server. Its methods are safe for
// concurrent use.
type Client struct {
	base  string
	http  *http.Client
	now   func() time.Time
	calls singleflight.Group

	mu    sync.Mutex
	cache map[string]answer // by query: the console asks a fixed few
}

type answer struct {
	samples []Sample
	err     error // a failure is kept as long: a Prometheus down is not asked on every page
	at      time.Time
}

// New returns a client of the Prometheus at base (http://prometheus:9090),
// each query bounded by timeout. now is the cache's clock; nil: time.Now.
func New(base string, timeout time.Duration, now func() time.Time) *Client {
	if now == nil {
		now = time.Now
	}
	return &Client{base: base, now: now, cache: map[string]answer{}, http: &http.Client{
		Timeout: timeout,
		// A redirect would send the query elsewhere: Prometheus answers
		// /api/v1/query itself.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// Query runs query at the present instant and returns its vector, reusing
// an answer, or a failure, younger than TTL; ctx bounds the caller's wait,
// the client's timeout the query itself. The samples returned are shared: do not
// modify them.
func (c *Client) Query(ctx context.Context, query string) ([]Sample, error) {
	c.mu.Lock()
	if a, ok := c.cache[query]; ok && c.now().Sub(a.at) < TTL {
		c.mu.Unlock()
		return a.samples, a.err
	}
	c.mu.Unlock()
	call := c.calls.DoChan(query, func() (any, error) {
		// Not the page's context: a page that goes away does not fail the
		// others waiting on the same query (the client's timeout bounds it).
		samples, err := c.query(context.WithoutCancel(ctx), query)
		c.mu.Lock()
		c.cache[query] = answer{samples: samples, err: err, at: c.now()}
		c.mu.Unlock()
		return samples, err
	})
	select {
	case r := <-call:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.([]Sample), nil
	case <-ctx.Done(): // the page's own deadline ends its wait
		return nil, ctx.Err()
	}
}

func (c *Client) query(ctx context.Context, query string) ([]Sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/api/v1/query?"+url.Values{"query": {query}}.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxBody+1))
	if err != nil {
		return nil, fmt.Errorf("prometheus: read the answer: %w", err)
	}
	if len(body) > MaxBody {
		return nil, fmt.Errorf("prometheus: an answer over %d bytes", MaxBody)
	}
	return Decode(resp.StatusCode, body)
}

// Decode reads an answer of /api/v1/query: a vector on success, else an
// error naming what is wrong (Prometheus's own message, truncated).
func Decode(status int, body []byte) ([]Sample, error) {
	var a struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string            `json:"resultType"`
			Result     []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &a); err != nil {
		return nil, fmt.Errorf("prometheus: status %d, not an API answer: %w", status, err)
	}
	if status != http.StatusOK || a.Status != "success" {
		return nil, fmt.Errorf("prometheus: status %d: %s", status, truncate(a.Error, maxErrorText))
	}
	if a.Data.ResultType != "vector" {
		return nil, fmt.Errorf("prometheus: a %.20q answer, want a vector", a.Data.ResultType)
	}
	if len(a.Data.Result) > MaxSamples {
		return nil, fmt.Errorf("prometheus: %d samples, more than %d", len(a.Data.Result), MaxSamples)
	}
	samples := make([]Sample, 0, len(a.Data.Result))
	for _, raw := range a.Data.Result {
		var r struct {
			Metric map[string]string `json:"metric"`
			Value  []json.RawMessage `json:"value"`
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, fmt.Errorf("prometheus: a malformed sample: %w", err)
		}
		var text string
		if len(r.Value) != 2 || json.Unmarshal(r.Value[1], &text) != nil {
			return nil, errors.New("prometheus: a sample without a [time, \"value\"] pair")
		}
		v, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return nil, fmt.Errorf("prometheus: a sample's value %.20q is not a number", text)
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue // no figure to show: as if the series were absent
		}
		samples = append(samples, Sample{Labels: r.Metric, Value: v})
	}
	return samples, nil
}

// By returns the samples' values by the value of label; a label value seen
// twice keeps the larger.
func By(samples []Sample, label string) map[string]float64 {
	m := make(map[string]float64, len(samples))
	for _, s := range samples {
		k := s.Labels[label]
		if old, ok := m[k]; !ok || s.Value > old {
			m[k] = s.Value
		}
	}
	return m
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
