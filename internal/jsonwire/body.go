package jsonwire

// MaxBody bounds a request body, 64 KiB, on every edge of the services:
// the decision API (checks, reports and their batches, POST /json), the
// admin API, and a gRPC rate limit message (a /json body's protobuf twin).
// One bound, so that a request one transport takes is never refused by
// another, and docs/api.md states one number. It lives here because this
// package reads every one of those bodies and is the one every edge
// (ops, httpapi, rlsapi, adminapi) already imports; pure, it brings them
// nothing, whereas an edge package holding it would make the others
// import it.
const MaxBody = 64 << 10
