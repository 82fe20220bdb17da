package rlsapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ratewarden/ratewarden/internal/jsonwire"
)

// MaxJSONBody bounds the body of POST /json: the largest request within
// the bounds is about 40 KiB of JSON (see DefaultMaxRecvMsgSize).
const MaxJSONBody = 64 << 10

// JSONHandler returns envoyproxy/ratelimit's POST /json, for the caller to
// mount (at /json) on the decision listener. The body is a
// RateLimitRequest in proto3 JSON (unknown fields refused); the answer is
// the RateLimitResponse in proto3 JSON, 200 when the overall code is OK
// (global shadow mode included) and 429 when it is OVER_LIMIT. Errors are
// {"error": "..."}: 400 for an invalid request, 401 without a valid token,
// 405 for another method, 413 for a body over MaxJSONBody, 503 when a
// deny-policy rule could not be decided. It requires Config.APITokens, as
// gRPC calls do; a caller that checks them itself, as the limiter's
// fasthttp port does, serves AnswerJSON instead.
func (s *Server) JSONHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			jsonwire.WriteError(w, http.StatusMethodNotAllowed, "method not allowed: use POST")
			return
		}
		if len(s.tokens) > 0 && !s.tokens.AllowsRequest(r) {
			s.log.Warn("rate limit call refused: missing or invalid bearer token",
				zap.String("source", r.RemoteAddr), zap.String("route", "/json"))
			s.metrics.requests.WithLabelValues(domainUnknown, resultUnauthenticated).Inc()
			w.Header().Set("WWW-Authenticate", `Bearer realm="ratewarden"`)
			jsonwire.WriteError(w, http.StatusUnauthorized, "missing or invalid bearer token")
			return
		}
		var body bytes.Buffer
		if _, err := body.ReadFrom(http.MaxBytesReader(w, r.Body, MaxJSONBody)); err != nil {
			s.metrics.invalid.WithLabelValues(fieldBody).Inc()
			s.metrics.requests.WithLabelValues(domainUnknown, resultInvalid).Inc()
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				jsonwire.WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", MaxJSONBody))
				return
			}
			jsonwire.WriteError(w, http.StatusBadRequest, "reading the body: "+err.Error())
			return
		}
		code, out := s.AnswerJSON(r.Context(), body.Bytes())
		jsonwire.WriteJSON(w, code, out)
	})
}

// AnswerJSON answers the body of a POST /json whose method, bearer token
// and size the caller has checked, as JSONHandler does: the status and the
// answer, the RateLimitResponse in proto3 JSON or {"error": "..."}. The
// limiter's decision port serves the route with it on fasthttp.
func (s *Server) AnswerJSON(ctx context.Context, body []byte) (code int, answer []byte) {
	var req rlsv3.RateLimitRequest
	if !decodeRequestJSON(body, &req) {
		req.Reset()
		if err := protojson.Unmarshal(body, &req); err != nil {
			s.metrics.invalid.WithLabelValues(fieldBody).Inc()
			s.metrics.requests.WithLabelValues(domainUnknown, resultInvalid).Inc()
			return http.StatusBadRequest, jsonwire.ErrorBody("not a RateLimitRequest in JSON: " + err.Error())
		}
	}
	resp, err := s.decide(ctx, &req)
	if err != nil {
		code = http.StatusBadRequest
		if status.Code(err) == codes.Unavailable {
			code = http.StatusServiceUnavailable
		}
		return code, jsonwire.ErrorBody(status.Convert(err).Message())
	}
	out, ok := appendResponseJSON(make([]byte, 0, 512), resp)
	if !ok {
		if out, err = protojson.Marshal(resp); err != nil { // a response the server built always encodes
			s.log.Error("encoding a rate limit response", zap.Error(err))
			return http.StatusInternalServerError, jsonwire.ErrorBody("internal error")
		}
	}
	code = http.StatusOK
	if resp.OverallCode == codeOverLimit {
		code = http.StatusTooManyRequests
	}
	return code, append(out, '\n')
}
