package httpapi

import (
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"unicode/utf8"

	"github.com/ratewarden/ratewarden/internal/endpoint"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/ipprefix"
	"github.com/ratewarden/ratewarden/internal/jsonwire"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// Bounds on what one request may carry. Events, logs and keys stay small
// whatever a client sends. Those that reach the decision event are the
// event's own (event.Validate), so the detector never refuses an event of
// a request the limiter accepted.
const (
	maxEndpoint   = event.MaxEndpoint
	maxUserID     = event.MaxUserID
	maxTier       = event.MaxTier
	maxMethod     = event.MaxMethod
	maxAttributes = 32
	maxAttrName   = 64
	maxAttrValue  = 1024
	maxCost       = 1_000_000
	// maxBatch bounds the checks of one POST /v1/check/batch: its answer,
	// its events and its share of a Redis round trip stay bounded (and its
	// body within jsonwire.MaxBody anyway).
	maxBatch = 100
)

// checkBody is the JSON body of POST /v1/check (docs/api.md "POST /v1/check"),
// decoded by parseCheckBody; the tags document it and let tests compare with
// encoding/json.
type checkBody struct {
	UserID     string            `json:"user_id"`
	IP         string            `json:"ip"`
	Endpoint   string            `json:"endpoint"`
	Method     string            `json:"method"`
	Tier       string            `json:"tier"`
	Cost       int64             `json:"cost"`
	Reserve    int64             `json:"reserve"`
	Attributes map[string]string `json:"attributes"`
}

// decodeCheck validates data, the body of POST /v1/check (at most
// jsonwire.MaxBody bytes: the server refuses a longer one).
func decodeCheck(data []byte) (rules.Request, error) {
	var body checkBody
	if err := parseCheckBody(data, &body); err != nil {
		return rules.Request{}, jsonwire.BadRequest("invalid JSON: %v", err)
	}
	return validateCheck(&body)
}

// decodeBatch validates data, the body of POST /v1/check/batch, into reqs
// (reused): 1 to maxBatch checks, each as decodeCheck wants it. An invalid
// check refuses the whole batch, naming its index. headers is the body's
// "headers": the answer gives each decision the rate-limit headers
// /v1/check would have set.
func decodeBatch(data []byte, reqs []rules.Request) (_ []rules.Request, headers bool, _ error) {
	reqs = reqs[:0]
	err := parseBatchBody(data, &headers, func(i int, body *checkBody) error {
		if i == maxBatch {
			return jsonwire.BadRequest("checks: at most %d per batch", maxBatch)
		}
		req, err := validateCheck(body)
		if err != nil {
			return jsonwire.BadRequest("checks[%d]: %v", i, err)
		}
		reqs = append(reqs, req)
		return nil
	})
	var in *jsonwire.InputError
	switch {
	case errors.As(err, &in):
		return reqs, false, in
	case err != nil:
		return reqs, false, jsonwire.BadRequest("invalid JSON: %v", err)
	case len(reqs) == 0:
		return reqs, false, jsonwire.BadRequest("checks: required, 1 to %d of them", maxBatch)
	}
	return reqs, headers, nil
}

// validateCheck validates and normalizes one check's body.
func validateCheck(body *checkBody) (rules.Request, error) {
	if body.Cost < 0 || body.Cost > maxCost {
		return rules.Request{}, jsonwire.BadRequest("cost: must be between 1 and %d", maxCost)
	}
	if body.Reserve < 0 || body.Reserve > rules.MaxReserve {
		return rules.Request{}, jsonwire.BadRequest("reserve: must be between 1 and %d (0 or absent: the rule's own)", rules.MaxReserve)
	}
	if len(body.Attributes) > maxAttributes {
		return rules.Request{}, jsonwire.BadRequest("attributes: at most %d entries", maxAttributes)
	}
	for k, v := range body.Attributes {
		if k == "" || len(k) > maxAttrName || len(v) > maxAttrValue {
			return rules.Request{}, jsonwire.BadRequest("attributes: names must be 1-%d bytes and values at most %d bytes", maxAttrName, maxAttrValue)
		}
	}
	req, err := newRequest(body.UserID, body.IP, body.Endpoint, body.Method, body.Tier, body.Cost, body.Attributes)
	req.Reserve = body.Reserve
	return req, err
}

// canonicalIP returns addr's string form: ip itself when it is already in
// that form, as clients almost always send it, else a new string.
func canonicalIP(ip string, addr netip.Addr) string {
	var buf [64]byte // more than the longest form, an IPv6 address with a zone
	if string(addr.AppendTo(buf[:0])) == ip {
		return ip
	}
	return addr.String()
}

// newRequest validates and normalizes the subject of a decision, from either
// the JSON API or forward-auth headers.
func newRequest(userID, ip, path, method, tier string, cost int64, attrs map[string]string) (rules.Request, error) {
	if ip == "" {
		return rules.Request{}, jsonwire.BadRequest("ip: required")
	}
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return rules.Request{}, jsonwire.BadRequest("ip: not an IP address")
	}
	addr = ipprefix.Client(addr)
	switch {
	case path == "":
		return rules.Request{}, jsonwire.BadRequest("endpoint: required")
	case len(path) > maxEndpoint:
		return rules.Request{}, jsonwire.BadRequest("endpoint: longer than %d bytes", maxEndpoint)
	case !utf8.ValidString(path):
		return rules.Request{}, jsonwire.BadRequest("endpoint: not valid UTF-8")
	case len(userID) > maxUserID || !utf8.ValidString(userID):
		return rules.Request{}, jsonwire.BadRequest("user_id: must be valid UTF-8 of at most %d bytes", maxUserID)
	case len(tier) > maxTier || !utf8.ValidString(tier):
		return rules.Request{}, jsonwire.BadRequest("tier: must be valid UTF-8 of at most %d bytes", maxTier)
	case event.HasControl(userID):
		return rules.Request{}, jsonwire.BadRequest("user_id: control characters are not allowed")
	case event.HasControl(tier):
		return rules.Request{}, jsonwire.BadRequest("tier: control characters are not allowed")
	}
	normalized := endpoint.Normalize(path)
	if event.HasControl(normalized) { // percent-decoded: "%00" is a NUL here
		return rules.Request{}, jsonwire.BadRequest("endpoint: control characters are not allowed")
	}
	if method == "" {
		method = http.MethodGet
	} else if !event.ValidMethod(method) {
		return rules.Request{}, jsonwire.BadRequest("method: must be an HTTP method token of at most %d letters", maxMethod)
	}
	if cost == 0 {
		cost = 1
	}
	return rules.Request{
		UserID:     userID,
		IP:         canonicalIP(ip, addr),
		Addr:       addr,
		Endpoint:   normalized,
		Method:     strings.ToUpper(method),
		Tier:       tier,
		Attributes: attrs,
		Cost:       cost,
	}, nil
}
