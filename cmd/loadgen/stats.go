package main

// profileTally counts the requests of one profile.
type profileTally struct {
	requests, allowed, denied, banned, errors uint64
}

func (p *profileTally) merge(o *profileTally) {
	p.requests += o.requests
	p.allowed += o.allowed
	p.denied += o.denied
	p.banned += o.banned
	p.errors += o.errors
}

// tally counts measured requests: by verdict, error class, status, reason
// and profile, with their latencies. Each worker writes its own; the
// collector merges them, so adding is a handful of increments.
//
// Every request counts once: requests = allowed + denied + errors.
type tally struct {
	requests, allowed, denied, errors, late uint64
	answers                                 uint64 // requests the limiter answered
	byClass                                 [numErrClasses]uint64
	byStatus                                [500]uint64 // HTTP: status-100, 100..599
	byCode                                  [numCodes]uint64
	byReason                                [numReasons]uint64
	byProfile                               [numProfiles]profileTally
	latency                                 Histogram // of every answered request, from its (scheduled) send time
}

// add counts one outcome.
func (t *tally) add(o *outcome) {
	t.requests++
	p := &t.byProfile[o.profile]
	p.requests++
	if o.late {
		t.late++
	}
	if o.answered {
		t.answers++
		t.latency.Record(o.latency)
	}
	if o.status >= 100 && o.status < 600 {
		t.byStatus[o.status-100]++
	}
	if o.code > 0 && o.code <= numCodes {
		t.byCode[o.code-1]++
	}
	if o.err != errNone {
		t.errors++
		t.byClass[o.err]++
		p.errors++
		return
	}
	if o.allowed {
		t.allowed++
		p.allowed++
	} else {
		t.denied++
		p.denied++
	}
	t.byReason[o.reason]++
	if o.reason == reasonBanned {
		p.banned++
	}
}

// merge adds o's counts to t.
func (t *tally) merge(o *tally) {
	if o.requests == 0 {
		return
	}
	t.requests += o.requests
	t.allowed += o.allowed
	t.denied += o.denied
	t.errors += o.errors
	t.late += o.late
	t.answers += o.answers
	for i := range o.byClass {
		t.byClass[i] += o.byClass[i]
	}
	for i, n := range o.byStatus {
		t.byStatus[i] += n
	}
	for i, n := range o.byCode {
		t.byCode[i] += n
	}
	for i := range o.byReason {
		t.byReason[i] += o.byReason[i]
	}
	for i := range o.byProfile {
		t.byProfile[i].merge(&o.byProfile[i])
	}
	t.latency.Merge(&o.latency)
}

// reset empties t, keeping its histogram's memory.
func (t *tally) reset() {
	if t.requests == 0 {
		return
	}
	t.requests, t.allowed, t.denied, t.errors, t.late, t.answers = 0, 0, 0, 0, 0, 0
	clear(t.byClass[:])
	clear(t.byStatus[:])
	clear(t.byCode[:])
	clear(t.byReason[:])
	clear(t.byProfile[:])
	t.latency.Reset()
}

// answered is the number of requests the limiter answered: an HTTP
// response, or a gRPC status other than UNAVAILABLE and DEADLINE_EXCEEDED.
func (t *tally) answered() uint64 { return t.answers }

// warmCounts counts the requests of the warm-up, shown in progress lines
// only.
type warmCounts struct {
	requests, errors uint64
}
