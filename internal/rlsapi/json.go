package rlsapi

import (
	"context"
	"net/http"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ratewarden/ratewarden/internal/jsonwire"
)

// AnswerJSON answers the body of envoyproxy/ratelimit's POST /json, whose
// method, bearer token and size the caller has checked (the limiter's
// decision port serves the route with it, on fasthttp, behind the decision
// gate and the port's body bound): the body is a RateLimitRequest in proto3
// JSON (unknown fields refused); the answer is the RateLimitResponse in
// proto3 JSON, 200 when the overall code is OK (global shadow mode
// included) and 429 when it is OVER_LIMIT, or {"error": "..."}: 400 for an
// invalid request, 503 when a deny-policy rule could not be decided.
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
