package main

import (
	"bytes"
	"strconv"
)

// batchPath is the limiter's batch endpoint (docs/api.md "POST
// /v1/check/batch"): several /v1/check bodies in one request, answered
// with each one's decision in order.
const batchPath = "/v1/check/batch"

// maxBatch is the most checks the limiter takes in one batch.
const maxBatch = 100

// appendBatchBody appends {"checks":[...]} carrying draws to dst; it does
// not allocate when dst has room.
func appendBatchBody(draws []Draw, dst []byte) []byte {
	dst = append(dst, `{"checks":[`...)
	for i := range draws {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = draws[i].AppendJSON(dst)
	}
	return append(dst, "]}"...)
}

// classifyBatch turns the answer to a batch into one outcome per check. A
// 200 lists the decisions in order, each with the status a single check
// would have got: classified as that check's answer would be. Any other
// status answers the whole batch (a 400 refuses every check of it), and an
// answer with fewer decisions than checks leaves the rest in error.
func classifyBatch(outs []outcome, res response) {
	if res.status != 200 {
		for i := range outs {
			classify(&outs[i], res)
		}
		return
	}
	list, ok := bytes.CutPrefix(memberValue(res.body, `"decisions"`), []byte("["))
	if !ok {
		list = nil // no list: every check is in error
	}
	for i := range outs {
		o := &outs[i]
		var entry []byte
		entry, list = nextObject(list)
		status, ok := entryStatus(entry)
		if !ok {
			o.answered, o.status, o.err = true, res.status, errBody
			continue
		}
		classify(o, response{status: status, body: entry})
	}
}

// entryStatus reads the "status" of a batch entry.
func entryStatus(entry []byte) (int, bool) {
	v := memberValue(entry, `"status"`)
	end := 0
	for end < len(v) && end < 3 && v[end] >= '0' && v[end] <= '9' {
		end++
	}
	status, err := strconv.Atoi(string(v[:end]))
	if err != nil || status < 100 || status > 599 {
		return 0, false
	}
	return status, true
}

// nextObject returns the first JSON object in b, from its '{' to the
// matching '}' (braces inside strings skipped), and what follows it; nil
// and nil when there is none or it is cut short.
func nextObject(b []byte) (obj, rest []byte) {
	start := -1
	depth := 0
	inString, escaped := false, false
	for i, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{':
			if depth == 0 {
				start = i
			}
			depth++
		case c == '}':
			if depth == 0 {
				return nil, nil // a closing brace before any object
			}
			depth--
			if depth == 0 {
				return b[start : i+1], b[i+1:]
			}
		case c == ']' && depth == 0:
			return nil, nil // the end of the list
		}
	}
	return nil, nil
}
