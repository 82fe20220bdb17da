package redisabuse

import (
	"github.com/ratewarden/ratewarden/internal/testkit/abusetest"
)

// detectT0 is the instant the detection tests count from: now, as for the
// shared scenarios. Expiries derived from a fixed date would be in the past
// once that date passed, and Redis would drop the keys at once.
var detectT0 = abusetest.T0
