package decide

import "sort"

// run is n members of a Redis sorted set sharing one score (ms). The model
// keeps the escalation hits as runs in ascending score order: the script
// only ever asks for counts and scores, never for member names.
type run struct {
	score, n int64
}

// insertRun adds n members at score.
func insertRun(log []run, score, n int64) []run {
	i := sort.Search(len(log), func(i int) bool { return log[i].score >= score })
	if i < len(log) && log[i].score == score {
		log[i].n += n
		return log
	}
	log = append(log, run{})
	copy(log[i+1:], log[i:])
	log[i] = run{score: score, n: n}
	return log
}

// keepNewest removes the lowest-scored members until at most keep remain
// (ZREMRANGEBYRANK key 0 -(keep+1)).
func keepNewest(log []run, keep int64) []run {
	var total int64
	for _, r := range log {
		total += r.n
	}
	i := 0
	for total > keep {
		drop := min(log[i].n, total-keep)
		log[i].n -= drop
		total -= drop
		if log[i].n == 0 {
			i++
		}
	}
	n := copy(log, log[i:])
	return log[:n]
}

// countFrom counts members with a score >= from (ZCOUNT key from +inf).
func countFrom(log []run, from int64) int64 {
	var n int64
	for i := len(log) - 1; i >= 0 && log[i].score >= from; i-- {
		n += log[i].n
	}
	return n
}
