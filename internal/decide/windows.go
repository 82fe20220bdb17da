package decide

// fieldOf returns the index of the fields of per in e, or -1.
func (e *entry) fieldOf(per int64) int {
	if e == nil {
		return -1
	}
	for i := range e.fields {
		if e.fields[i].per == per {
			return i
		}
	}
	return -1
}

// setField writes the fields of per, adding them when absent.
func (e *entry) setField(f field) {
	if i := e.fieldOf(f.per); i >= 0 {
		e.fields[i] = f
		return
	}
	e.fields = append(e.fields, f)
}

// setFields writes fields into the hash at key, as the scripts' HSET, and
// its expiry, as their PEXPIRE.
func (sh *shard) setFields(key string, fields []field, expireAt int64) {
	e := sh.create(key)
	for _, f := range fields {
		e.setField(f)
	}
	e.expireAt = expireAt
}

// fixedWindow mirrors lua/fixed_window.lua. Field a is the window start, b
// the count.
func (sh *shard) fixedWindow(c Call, now int64, outs []outcome) ([]outcome, bool) {
	e := sh.get(c.Keys.State)
	admitted := true
	var startBuf [8]int64
	starts := startBuf[:0]
	var countBuf [8]int64
	counts := countBuf[:0]
	for _, l := range c.Limits {
		per := l.Per.Milliseconds()
		_, off := divmod(now, per)
		start, count := now-off, int64(0)
		if i := e.fieldOf(per); i >= 0 && e.fields[i].a >= start {
			start, count = e.fields[i].a, e.fields[i].b
		}
		starts, counts = append(starts, start), append(counts, count)
		deny := count+c.Cost > l.Requests
		admitted = admitted && !deny
		outs = append(outs, outcome{quota: l.Requests, deny: deny})
	}
	var ttl int64
	debit := c.debits(admitted)
	for i, l := range c.Limits {
		used := counts[i]
		if debit {
			used = cappedAdd(used, c.Cost, MaxUsage)
		}
		o := &outs[i]
		o.remaining = l.Requests - used
		o.reset = starts[i] + l.Per.Milliseconds() - now
		if o.deny {
			o.retry = o.reset
		}
		ttl = max(ttl, o.reset)
		if debit {
			if e == nil {
				e = sh.create(c.Keys.State)
			}
			e.setField(field{per: l.Per.Milliseconds(), a: starts[i], b: used})
		}
	}
	if debit {
		e.expireAt = now + ttl
	}
	return outs, admitted
}
