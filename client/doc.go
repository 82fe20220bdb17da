// Package client is the Go client of the ratewarden limiter: decisions
// (Check, CheckBatch) and outcome reports (Report, ReportBatch, and
// ReportAsync, which sends them in the background), with the net/http
// middleware (Middleware) and the gRPC server interceptors
// (UnaryServerInterceptor, StreamServerInterceptor) that put a limiter in
// front of an application's handlers in three lines:
//
//	c, err := client.New(client.Config{URL: "http://limiter:8080", Token: os.Getenv("RATEWARDEN_TOKEN")})
//	if err != nil { ... }
//	http.ListenAndServe(":8000", client.Middleware(c, client.MiddlewareConfig{})(mux))
//
// A Client keeps keep-alive connections to the limiter, bounds every call
// by its context's deadline (or Config.Timeout), and when the limiter
// cannot decide answers with the caller's failure policy (FailOpen,
// FailClosed or a Fallback), behind a circuit breaker that makes a dead
// limiter cost microseconds rather than a timeout per request. Errors say
// whether the limiter answered (*Error).
//
// The exported API is kept stable like the limiter's HTTP API (docs/client.md).
package client
