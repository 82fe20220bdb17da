package client

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/client/internal/jsonwire"
)

// The JSON of the limiter's API, written and read by hand: a check runs on
// every request of the application, and encoding/json's reflection would
// be most of the client's cost. Readers skip the fields they do not know,
// which a newer limiter may add.

// appendSubject appends the subject fields shared by checks and reports,
// without the braces, each in the form the limiter accepts (fields.go).
func appendSubject(b []byte, ip, userID, endpoint, method, tier string, attrs map[string]string) []byte {
	b = append(b, `"ip":`...)
	b = jsonwire.AppendString(b, ip)
	b = append(b, `,"endpoint":`...)
	b = jsonwire.AppendString(b, wireEndpoint(endpoint))
	if userID != "" {
		b = append(b, `,"user_id":`...)
		b = jsonwire.AppendString(b, textField(userID, maxUserID))
	}
	if validMethod(method) {
		b = append(b, `,"method":`...)
		b = jsonwire.AppendString(b, method)
	}
	if tier != "" {
		b = append(b, `,"tier":`...)
		b = jsonwire.AppendString(b, textField(tier, maxTier))
	}
	if len(attrs) > 0 {
		b = append(b, `,"attributes":{`...)
		first := true
		for k, v := range attrs {
			if !first {
				b = append(b, ',')
			}
			first = false
			b = jsonwire.AppendString(b, textField(k, maxAttrName))
			b = append(b, ':')
			b = jsonwire.AppendString(b, textField(v, maxAttrValue))
		}
		b = append(b, '}')
	}
	return b
}

// appendCheck appends the body of POST /v1/check.
func appendCheck(b []byte, r *Request) []byte {
	b = append(b, '{')
	b = appendSubject(b, r.IP, r.UserID, r.Endpoint, r.Method, r.Tier, r.Attributes)
	if r.Cost != 0 {
		b = append(b, `,"cost":`...)
		b = strconv.AppendInt(b, r.Cost, 10)
	}
	return append(b, '}')
}

// appendOutcome appends the body of POST /v1/report.
func appendOutcome(b []byte, o *Outcome) []byte {
	b = append(b, '{')
	b = appendSubject(b, o.IP, o.UserID, o.Endpoint, o.Method, o.Tier, o.Attributes)
	if o.Status != 0 { // 0: a release only (validOutcome)
		b = append(b, `,"status":`...)
		b = strconv.AppendInt(b, int64(o.Status), 10)
	}
	switch {
	case o.Cost == CostNone:
		b = append(b, `,"cost":0`...)
	case o.Cost > 0:
		b = append(b, `,"cost":`...)
		b = strconv.AppendInt(b, o.Cost, 10)
	}
	if o.Hold != "" {
		b = append(b, `,"hold":`...)
		b = jsonwire.AppendString(b, o.Hold)
	}
	return append(b, '}')
}

// decisionField reads one field of a decision's object.
func decisionField(p *jsonwire.Parser, name string, d *Decision) error {
	var err error
	switch name {
	case "allowed":
		d.Allowed, err = p.Bool()
	case "reason":
		d.Reason, err = p.Str()
	case "rule_id":
		d.RuleID, err = p.Str()
	case "algorithm":
		d.Algorithm, err = p.Str()
	case "limit":
		d.Limit, err = p.Integer()
	case "remaining":
		d.Remaining, err = p.Integer()
	case "reset_after_ms":
		d.Reset, err = millis(p)
	case "retry_after_ms":
		d.RetryAfter, err = millis(p)
	case "mode":
		d.Mode, err = p.Str()
	case "shadow":
		d.Shadow, err = p.Bool()
	case "event_id":
		d.EventID, err = p.Str()
	case "hold":
		// Read as the limiter would read it back: a hold it would refuse
		// to release is no answer of its own.
		if d.Hold, err = p.Str(); err == nil && !validHold(d.Hold) {
			err = errBadHold
		}
	default:
		err = p.Skip()
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

func millis(p *jsonwire.Parser) (time.Duration, error) {
	n, err := p.Integer()
	return time.Duration(n) * time.Millisecond, err
}

var errNoReason = errors.New("no reason: not a decision")

// parseDecision reads the answer of POST /v1/check.
func parseDecision(body []byte, d *Decision) error {
	p := jsonwire.New(body)
	if err := p.Object(func(name string) error { return decisionField(&p, name, d) }); err != nil {
		return err
	}
	if err := p.End(); err != nil {
		return err
	}
	if d.Reason == "" {
		return errNoReason
	}
	return nil
}

// batchError is an entry of a batch's answer that is no decision: the
// limiter's error, and whether it is the refusal of a rule whose failure
// policy is deny that it could not decide (the entry's 503 names the rule,
// read into the decision's RuleID, and its policy).
type batchError struct {
	msg      string
	status   int64
	denyRule bool
}

// parseBatch reads the answer of POST /v1/check/batch into ds (as long as
// the checks): each entry a decision, or the error of one the limiter could
// not make (errs[i], zero for a decision).
func parseBatch(body []byte, ds []Decision, errs []batchError) error {
	p := jsonwire.New(body)
	n := 0
	seen := false
	err := p.Object(func(name string) error {
		if name != "decisions" {
			return p.Skip()
		}
		if seen { // two answers run together: neither is this batch's
			return errors.New("decisions given twice")
		}
		seen = true
		return p.Array(func(i int) error {
			if i >= len(ds) {
				return fmt.Errorf("more decisions than checks")
			}
			n++
			var status int64
			var policy string
			err := p.Object(func(name string) error {
				var err error
				switch name {
				case "status":
					status, err = p.Integer()
				case "error":
					errs[i].msg, err = p.Str()
				case "on_redis_failure":
					policy, err = p.Str()
				case "headers":
					ds[i].headers, err = batchHeaders(&p)
				default:
					err = decisionField(&p, name, &ds[i])
				}
				return err
			})
			if err == nil && status == 200 && ds[i].Reason == "" {
				// No decision, as parseDecision says of a single check's
				// answer: a refusal without a reason is no limiter's.
				err = errNoReason
			}
			if err == nil && status != 200 {
				if errs[i].msg == "" {
					errs[i].msg = "status " + strconv.FormatInt(status, 10)
				}
				errs[i].status = status
				errs[i].denyRule = status == 503 && policy == denyPolicy && ds[i].RuleID != ""
			}
			return err
		})
	})
	if err == nil {
		err = p.End()
	}
	if err == nil && n != len(ds) {
		err = fmt.Errorf("%d decisions for %d checks", n, len(ds))
	}
	return err
}

// batchHeaders reads the "headers" of a decision of a batch asked with
// "headers": true: the rate-limit headers /v1/check would have set, by
// name; names the client does not give on are skipped.
func batchHeaders(p *jsonwire.Parser) (rateLimitHeaders, error) {
	var vals [len(limitHeaderNames)]string
	err := p.Object(func(name string) error {
		v, err := p.Str()
		if err != nil {
			return err
		}
		for i, n := range limitHeaderNames {
			if n == name {
				vals[i] = v
			}
		}
		return nil
	})
	if err != nil {
		return rateLimitHeaders{}, err
	}
	var r rateLimitHeaders
	n := 0
	for i, v := range vals {
		if n+len(v) > 0xffff {
			vals[i] = "" // a header of 64 KiB is no rate-limit header
		}
		n += len(vals[i])
	}
	if n == 0 {
		return r, nil
	}
	var b strings.Builder
	b.Grow(n)
	for i, v := range vals {
		b.WriteString(v)
		r.end[i] = uint16(b.Len())
	}
	r.all = b.String()
	return r, nil
}

// parseReportBody reads the answer of POST /v1/report.
func parseReportBody(body []byte, r *ReportResult) error {
	p := jsonwire.New(body)
	if err := parseReport(&p, r); err != nil {
		return err
	}
	return p.End()
}

// parseReport reads the answer of POST /v1/report (or one entry of the
// batch's) at p.
func parseReport(p *jsonwire.Parser, r *ReportResult) error {
	return p.Object(func(name string) error {
		var err error
		switch name {
		case "event_id":
			r.EventID, err = p.Str()
		case "mode":
			r.Mode, err = p.Str()
		case "rules":
			err = p.Array(func(int) error {
				var b Budget
				err := p.Object(func(name string) error {
					var err error
					switch name {
					case "rule_id":
						b.RuleID, err = p.Str()
					case "limit":
						b.Limit, err = p.Integer()
					case "remaining":
						b.Remaining, err = p.Integer()
					case "reset_after_ms":
						b.Reset, err = millis(p)
					case "spent":
						b.Spent, err = p.Bool()
					case "released":
						b.Released, err = p.Bool()
					default:
						err = p.Skip()
					}
					return err
				})
				r.Rules = append(r.Rules, b)
				return err
			})
		default:
			err = p.Skip()
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	})
}

// errorAnswer reads an error answer's body: its "error", or the beginning
// of the body when it has none; and denyRule, the rule it names when it
// holds the limiter's marker of a rule whose failure policy is deny that
// could not be decided ({"rule_id": ..., "on_redis_failure": "deny"}).
func errorAnswer(body []byte) (msg, denyRule string) {
	p := jsonwire.New(body)
	var rule, policy string
	if p.Object(func(name string) error {
		var err error
		switch name {
		case "error":
			msg, err = p.Str()
		case "rule_id":
			rule, err = p.Str()
		case "on_redis_failure":
			policy, err = p.Str()
		default:
			err = p.Skip()
		}
		return err
	}) == nil && msg != "" {
		if policy == denyPolicy {
			denyRule = rule
		}
		return msg, denyRule
	}
	const most = 200
	if len(body) > most {
		body = body[:most]
	}
	return strconv.Quote(string(body)), ""
}

// denyPolicy is the on_redis_failure of a rule whose check the limiter
// refuses when it cannot decide it.
const denyPolicy = "deny"

// appendOutcomes appends the body of POST /v1/report/batch.
func appendOutcomes(b []byte, os []Outcome) []byte {
	b = append(b, `{"reports":[`...)
	for i := range os {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendOutcome(b, &os[i])
	}
	return append(b, "]}"...)
}

// parseReports reads the answer of POST /v1/report/batch, n reports.
func parseReports(body []byte, n int, rs *[]ReportResult) error {
	p := jsonwire.New(body)
	seen := false
	err := p.Object(func(name string) error {
		if name != "reports" {
			return p.Skip()
		}
		if seen {
			return errors.New("reports given twice")
		}
		seen = true
		return p.Array(func(int) error {
			var r ReportResult
			err := parseReport(&p, &r)
			*rs = append(*rs, r)
			return err
		})
	})
	if err == nil {
		err = p.End()
	}
	if err == nil && len(*rs) != n {
		err = fmt.Errorf("%d answers for %d reports", len(*rs), n)
	}
	return err
}
