package httpapi

import (
	"net/http"
	"strconv"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/jsonwire"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// authReportPath is the outcome report of a forward-auth gateway: a
// request /v1/auth let through, reported once its response is sent. It is
// not below /v1/auth on purpose: a gateway that hands its clients' paths
// to /v1/auth/<path> (Envoy's ext_authz) or its clients' headers (Traefik's
// forwardAuth) must never let a client turn its check into a report.
const authReportPath = "/v1/report/auth"

// The headers of an outcome report to authReportPath; the subject's are
// /v1/auth's.
const (
	headerHold   = "X-RateLimit-Hold"   // the hold a check took, in its answer; the one to release, in a report
	headerStatus = "X-RateLimit-Status" // the status the client got
	headerCost   = "X-RateLimit-Cost"   // the units the response used
)

// authReport answers POST /v1/report/auth, POST /v1/report for a gateway
// that cannot send a body (nginx's post_action): the subject from the
// headers /v1/auth reads, the status from X-RateLimit-Status, the cost
// from X-RateLimit-Cost (1 when absent) and the hold to release from
// X-RateLimit-Hold. The answer is /v1/report's.
func (h *handler) authReport(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		jsonwire.WriteJSON(w, http.StatusMethodNotAllowed, []byte(`{"error":"method not allowed: use POST"}`+"\n"))
		return
	}
	c := h.decisions.Get().(*decision)
	defer h.release(c)
	status, hold, cost, err := authOutcome(r.Header)
	if err == nil {
		c.req, err = h.authReportRequest(r)
	}
	if err != nil {
		h.inputError(w, err)
		return
	}
	c.req.Cost = cost
	h.svc.ReportHold(r.Context(), &c.req, status, hold, &c.d)
	var buf [256]byte
	b := appendReport(append(buf[:0], '{'), &c.d)
	jsonwire.WriteJSON(w, http.StatusOK, append(b, "}\n"...))
}

// authReportRequest builds a report's subject as authRequest builds a
// check's, the endpoint from the headers only: the report's own path is
// not the client's.
func (h *handler) authReportRequest(r *http.Request) (rules.Request, error) {
	endpoint := firstHeader(r.Header, "X-Forwarded-Uri", "X-Original-Uri")
	if endpoint == "" {
		return rules.Request{}, jsonwire.BadRequest("endpoint: set X-Forwarded-Uri or X-Original-URI")
	}
	return h.authSubject(r, endpoint)
}

// authOutcome reads and bounds the outcome headers of a report to
// authReportPath.
func authOutcome(hd http.Header) (status int, hold string, cost int64, err error) {
	// nginx sends an unset variable as an empty header: no hold.
	if hold = hd.Get(headerHold); hold != "" && !decide.ValidHoldID(hold) {
		return 0, "", 0, jsonwire.BadRequest("%s: not a hold id (the 22 characters a check answered in %s)", headerHold, headerHold)
	}
	s := hd.Get(headerStatus)
	if s == "" && hold != "" {
		return limiter.ReleaseOnly, hold, 0, nil
	}
	n, perr := strconv.Atoi(s)
	if perr != nil || n < event.MinStatus || n > event.MaxStatus {
		return 0, "", 0, jsonwire.BadRequest("%s: required, the HTTP status the client got (%d to %d), unless the report only releases a hold", headerStatus, event.MinStatus, event.MaxStatus)
	}
	cost = 1
	if v := hd.Get(headerCost); v != "" {
		if cost, perr = strconv.ParseInt(v, 10, 64); perr != nil || cost < 0 || cost > maxCost {
			return 0, "", 0, jsonwire.BadRequest("%s: must be a whole number between 0 and %d", headerCost, maxCost)
		}
	}
	return n, hold, cost, nil
}
