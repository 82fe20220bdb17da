// Package redisabuse keeps the detector's state in Redis: the sliding
// windows of each offender (Windows), the distinct sets of the outcome
// scenarios (Distinct) and the ledger of the bans and warnings issued
// (Ledger), run by the detect_* scripts of package lua, so
// that the state survives a detector restart and is shared by every
// detector instance.
//
// It is named after package abuse, whose Windows, Distinct and Ledger it implements
// on Redis (testkit/abusetest holds their reference in memory): "abuse, in
// Redis". The rate-limit decisions run in package redisstore, and the
// state the limiters of a fleet share, the blacklist where the ledger's
// enforced bans go included, in package redisfleet.
package redisabuse
