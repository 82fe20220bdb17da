package decide

// A give-back undoes what Redis counted for a call whose caller was refused
// without its answer: the round trip outlived the caller's deadline
// (REDIS_TIMEOUT), the limiter refused the request, and the reply came
// later saying Redis had admitted it. Left counted, those units would be
// spent by nobody: a slow Redis would refuse clients for the rest of their
// window while admitting nothing. Only an admission is given back: a
// denial counts nothing (or, for a call that debits denied calls, counts
// what an answer in time would have counted too), and a probe writes
// nothing.
//
// A give-back never lets a key admit more than it would have had the call
// never been made: it takes the units off the window (or log member) the
// call counted in only while that is still the key's, and puts tokens back
// in a bucket only up to its burst (less what leases hold).
type GiveBack struct {
	// Call is the call as it was sent: keys, algorithm, limits, Leased.
	Call Call
	// Result is Redis's answer to it, which came too late: At finds the
	// window or log member the call counted in; Granted and LeaseUntil say
	// what a leased call was lent besides its cost.
	Result Result
}

// GiveBackOf returns the give-back of c, answered r after its caller was
// refused, and whether there is anything to give back.
func GiveBackOf(c Call, r Result) (GiveBack, bool) {
	if !r.Allowed || c.Probe || c.Cost+r.Granted <= 0 {
		return GiveBack{}, false
	}
	return GiveBack{Call: c, Result: r}, true
}

// Units is the units g gives back: the call's cost and what it was lent.
func (g GiveBack) Units() int64 { return g.Call.Cost + g.Result.Granted }
