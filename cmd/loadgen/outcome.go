package main

import (
	"bytes"
	"errors"
	"net"
	"time"
)

// errClass says why a request failed; the summary counts each class.
type errClass int

const (
	errNone       errClass = iota
	errConnect             // could not open a connection
	errWrite               // the request could not be sent
	errRead                // the connection failed or closed before the whole response
	errTimeout             // no full response within -timeout
	errProtocol            // the response is not valid HTTP/1.x
	errStatus4xx           // 4xx other than 429: the limiter rejected the input
	errStatus5xx           // 5xx: e.g. 503 when a deny-on-failure rule cannot be decided
	errStatusMisc          // 1xx left unanswered, 3xx
	errBody                // a 2xx whose body holds no "allowed" verdict; gRPC: OK without an overall code
	errUnavail             // gRPC UNAVAILABLE: no connection, a connection lost, or the limiter unavailable
	errGRPCStatus          // gRPC: any other status than OK, UNAVAILABLE and DEADLINE_EXCEEDED (a timeout)
	numErrClasses
)

var errClassNames = [numErrClasses]string{"", "connect", "write", "read", "timeout", "protocol",
	"status_4xx", "status_5xx", "status_other", "body", "unavailable", "grpc_status"}

func (c errClass) String() string { return errClassNames[c] }

// ioClass classifies the error of a write or read.
func ioClass(err error, phase errClass) errClass {
	var proto *protocolError
	var nerr net.Error
	switch {
	case errors.As(err, &proto):
		return errProtocol
	case errors.As(err, &nerr) && nerr.Timeout():
		return errTimeout
	}
	return phase
}

// reason is the "reason" of a decision (docs/api.md "POST /v1/check"), for the
// summary; a gRPC answer has only its overall code, OK or OVER_LIMIT.
type reason int

const (
	reasonOther reason = iota // absent or unknown
	reasonOK                  // also gRPC's OK
	reasonRateLimited
	reasonBanned
	reasonExempt
	reasonNoRule
	reasonOverLimit // gRPC's OVER_LIMIT, whatever the cause
	numReasons
)

var reasonNames = [numReasons]string{"other", "ok", "rate_limited", "banned", "exempt", "no_rule", "over_limit"}

func (r reason) String() string { return reasonNames[r] }

// outcome is the result of one request.
type outcome struct {
	profile Profile
	// answered says the limiter answered (a decision or an error of its
	// own), so latency counts.
	answered bool
	status   int      // HTTP: 0 when no response arrived
	code     int      // gRPC: the status code + 1; 0 when no call ended
	err      errClass // errNone for a decision
	allowed  bool
	reason   reason
	latency  time.Duration // when answered
	late     bool          // open loop: sent more than lateAfter behind its schedule
}

// classify turns a response into an outcome: a decision (allowed or
// denied), or an error of the status or body class. POST /v1/check answers
// 200 for every decision with "allowed" in the body; 429 is taken as a
// denial too, as forward-auth answers it.
func classify(o *outcome, res response) {
	o.answered = true
	o.status = res.status
	switch {
	case res.status == 429:
		o.allowed = false
		o.reason = reasonRateLimited
		if allowed, r, ok := parseDecision(res.body); ok && !allowed {
			o.reason = r
		}
	case res.status >= 200 && res.status < 300:
		allowed, r, ok := parseDecision(res.body)
		if !ok {
			o.err = errBody
			return
		}
		o.allowed, o.reason = allowed, r
	default:
		classifyStatus(o, res.status)
	}
}

// classifyStatus sets the error class of an answer that is no decision.
func classifyStatus(o *outcome, status int) {
	switch {
	case status >= 500:
		o.err = errStatus5xx
	case status >= 400:
		o.err = errStatus4xx
	default:
		o.err = errStatusMisc
	}
}

// parseDecision finds the "allowed" and "reason" members of a decision
// without decoding the JSON: the limiter writes them first, so the search
// ends within a few dozen bytes.
func parseDecision(body []byte) (allowed bool, r reason, ok bool) {
	v := memberValue(body, `"allowed"`)
	switch {
	case bytes.HasPrefix(v, []byte("true")):
		allowed = true
	case bytes.HasPrefix(v, []byte("false")):
	default:
		return false, reasonOther, false
	}
	v = memberValue(body, `"reason"`)
	if len(v) > 0 && v[0] == '"' {
		if end := bytes.IndexByte(v[1:], '"'); end >= 0 {
			name := v[1 : 1+end]
			for i := reasonOK; i < numReasons; i++ {
				if string(name) == reasonNames[i] {
					return allowed, i, true
				}
			}
		}
	}
	return allowed, reasonOther, true
}

// memberValue returns what follows `"name":` (spaces skipped) in body, or
// nil.
func memberValue(body []byte, quotedName string) []byte {
	i := bytes.Index(body, []byte(quotedName))
	if i < 0 {
		return nil
	}
	v := bytes.TrimLeft(body[i+len(quotedName):], " \t\r\n")
	if len(v) == 0 || v[0] != ':' {
		return nil
	}
	return bytes.TrimLeft(v[1:], " \t\r\n")
}
