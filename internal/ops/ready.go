package ops

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"slices"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/jsonwire"
)

// Probe is one dependency checked by /readyz.
type Probe struct {
	Name string
	// Required probes make the process unready when they fail; the others
	// are only reported.
	Required bool
	Check    func(ctx context.Context) error
}

// probeTimeout bounds a /readyz call: the probes run at once, each under it.
const probeTimeout = 2 * time.Second

type readiness struct {
	probes  []Probe
	details func() map[string]string
	log     *zap.Logger
}

// ServeHTTP answers 200 when every required dependency answers; the body
// says which are up, e.g.
// {"status":"ready","mode":"redis","checks":{"kafka":"up","redis":"up"}}.
func (h *readiness) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), probeTimeout)
	defer cancel()
	type result struct {
		probe Probe
		err   error
	}
	results := make(chan result, len(h.probes))
	for _, p := range h.probes {
		go func() { results <- result{p, p.Check(ctx)} }()
	}
	status, code := "ready", http.StatusOK
	checks := make(map[string]string, len(h.probes))
	for range h.probes {
		res := <-results
		checks[res.probe.Name] = "up"
		if res.err == nil {
			continue
		}
		// The class only: the error's text can name internal addresses, and
		// /readyz may be reachable by more than the operators.
		checks[res.probe.Name] = "down: " + probeErrorClass(res.err)
		h.log.Debug("readiness probe failed", zap.String("probe", res.probe.Name), zap.Error(res.err))
		if res.probe.Required {
			status, code = "unready", http.StatusServiceUnavailable
		}
	}
	jsonwire.WriteJSON(w, code, h.body(status, checks))
}

// body encodes the answer with its fields in a fixed order: status, the
// details (sorted), checks.
func (h *readiness) body(status string, checks map[string]string) []byte {
	b := append([]byte(`{"status":`), jsonString(status)...)
	if h.details != nil {
		d := h.details()
		keys := make([]string, 0, len(d))
		for k := range d {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			b = append(b, ',')
			b = append(b, jsonString(k)...)
			b = append(b, ':')
			b = append(b, jsonString(d[k])...)
		}
	}
	c, _ := json.Marshal(checks) // sorted keys
	b = append(b, `,"checks":`...)
	b = append(b, c...)
	return append(b, "}\n"...)
}

func jsonString(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}

// probeErrorClass names what kind of failure a readiness probe met, in
// words that carry no address or other detail of the network behind it.
func probeErrorClass(err error) string {
	var dnsErr *net.DNSError
	var netErr net.Error
	var opErr *net.OpError
	switch {
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout()):
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.As(err, &dnsErr):
		return "name resolution"
	case errors.As(err, &opErr):
		return "connection"
	}
	return "error"
}
