// Package testkit groups the helpers of the tests, and nothing else: each
// package below it is imported by tests only (internal/layering_test.go
// guards that): private Redis servers and clusters
// (redistest), databases (pgtest), the embedded broker (kafkatest),
// processes (proctest), certificates (tlstest), the decision service on a
// real Redis (limitertest), the events' JSON Schemas
// (eventschema) and what reaches the ban topic (bantest), the gateway recipes' programs (gatewaytest), the
// benchmarks' knobs (benchenv), the scenario tables of the decision model
// (decidetest) and the in-memory detection state with its scenario tables
// (abusetest). This package holds what
// the tests of every package share: Unavailable (skip a test whose service
// or program is missing, fail it under CI), WaitFor (poll a condition),
// AvoidWindowEnd and AvoidHourEnd (keep a test that counts away from the
// end of a fixed window), Start (run a service until the test ends,
// requiring a clean stop),
// MetricSum (read a metric from a registry) and RaceDetector.
package testkit
