// Package client is the Go client of the ratewarden limiter: decisions
// (Check, CheckBatch) and outcome reports (Report, ReportBatch, and
// ReportAsync, which sends them in the background), with the net/http
// middleware (Middleware) that puts a limiter in front of an application's
// handlers in three lines (package rlgrpc has the gRPC server
// interceptors, package clienttest a stand-in limiter for an
// application's tests):
//
//	c, err := client.New(client.Config{URL: "http://limiter:8080", Token: os.Getenv("RATEWARDEN_TOKEN")})
//	if err != nil { ... }
//	http.ListenAndServe(":8000", client.Middleware(c, client.MiddlewareConfig{})(mux))
//
// A Client keeps keep-alive connections to the limiter, bounds every round
// trip by Config.Timeout (never by the caller's context, whose client could
// otherwise pick the failure policy by going away; the wait for a free
// connection ends when the caller goes), and when the limiter
// cannot decide answers with the caller's failure policy (FailOpen,
// FailClosed or a Fallback), behind a circuit breaker that makes a dead
// limiter cost microseconds rather than a timeout per request. Three
// checks are refused whatever the policy: one the limiter refuses as
// invalid (ReasonInvalid; the client sends every field escaped and bounded
// as the limiter accepts it, so a request's own path or user id cannot
// make it invalid); one a rule whose on_redis_failure is deny refuses
// because the limiter cannot decide it without Redis (ReasonUndecidable:
// the limiter's 503 names the rule and its policy; the middleware answers
// 503 with Retry-After, the interceptors codes.Unavailable, and the
// breaker does not count it, since the limiter answered); and one it could
// not decide after its caller had gone (ReasonCallerGone). A 503 that
// names no rule (a proxy's) is the limiter unavailable. Errors say whether
// the limiter answered (*Error) and, with errors.Is, why (ErrInvalid,
// ErrUndecidable, ErrUnauthorized, ErrCallerGone, ErrBreakerOpen);
// Config.OnError sees every one, Stats counts them, and Ping lets an
// application refuse to start with a token the limiter refuses.
//
// Concurrent checks share calls: a check alone goes at once as its own
// call; checks that arrive while a call is on its way go together in one
// batch when it returns (or after Config.BatchWait), each answered, and
// counted by the breaker, as its own call would be
// (Config.DisableBatching turns it off).
//
// The exported API is kept stable like the limiter's HTTP API (docs/client.md).
package client
