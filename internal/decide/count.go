package decide

import "time"

// Counted reports whether c can be decided by counting alone: a fixed
// window of one limit without penalty or escalations. Redis then decides it
// with INCRBY and PEXPIRE on a key of its own per window (see
// CountedWindow), no script. A leased call is not counted: the lease
// script keeps the fixed window's hash, and so does a call of a rule that
// reserves (Call.Reserve), whose refunds find their window there.
func (c *Call) Counted() bool {
	return c.Algorithm == FixedWindow && !c.Leased && len(c.Limits) == 1 && c.Penalty == 0 && len(c.Escalations) == 0 &&
		c.Reserve == 0
}

// CountedWindow returns the index of the fixed window of per (ms) that
// holds nowMs, and the time left in it (ms).
func CountedWindow(nowMs, per int64) (index, left int64) {
	q, off := divmod(nowMs, per)
	return q, per - off
}

// CountedResult decides a counted call (see Call.Counted) from count, the
// window's count after adding the call's cost, as INCRBY answers it: the
// call is admitted when count is within the limit, and a denied call's cost
// is to be taken back unless the call debits denied calls (DebitDenied). It
// answers as the model's fixed window does for such a count. A probe adds
// nothing (INCRBY 0): count is the window's, and the probe is admitted when
// its cost would fit. At is the call's NowMs, which placed it in its
// window.
func CountedResult(c *Call, count int64) Result {
	r := countedResult(c, count)
	r.At = c.NowMs
	return r
}

// countedResult is CountedResult but At.
func countedResult(c *Call, count int64) Result {
	l := c.Limits[0]
	_, left := CountedWindow(c.NowMs, l.Per.Milliseconds())
	reset := time.Duration(left) * time.Millisecond
	if c.Probe {
		if count+c.Cost <= l.Requests {
			return Result{Allowed: true, Limit: l.Requests, Remaining: l.Requests - count, ResetAfter: reset}
		}
		return Result{Limit: l.Requests, Remaining: max(0, l.Requests-count), ResetAfter: reset, RetryAfter: reset}
	}
	if count <= l.Requests {
		return Result{Allowed: true, Limit: l.Requests, Remaining: l.Requests - count, ResetAfter: reset}
	}
	used := count - c.Cost // what the window holds once the cost is taken back
	if c.DebitDenied {
		used = count
	}
	return Result{Limit: l.Requests, Remaining: max(0, l.Requests-used), ResetAfter: reset, RetryAfter: reset}
}
