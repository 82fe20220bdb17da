// Package redisfleet keeps in Redis the state the limiters of a fleet
// share: the blacklist of bans they enforce (written by the detector and
// the admin API, announced on pub/sub), their heartbeats with the rules
// each runs, the announcements of new dynamic rules, and the notices of
// leased keys found past their limit.
//
// A fleet is the set of limiter instances that serve one deployment under
// one key prefix: what is here is what one of them tells the others, as
// opposed to the decisions each makes (package redisstore, the engine
// that runs the rate-limit scripts) and to the detector's own state
// (package redisabuse).
package redisfleet
