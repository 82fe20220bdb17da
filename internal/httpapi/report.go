package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/jsonwire"
	"github.com/ratewarden/ratewarden/internal/limiter"
)

// The outcome report API: one report, several.
const (
	reportPath      = "/v1/report"
	reportBatchPath = "/v1/report/batch"
)

// reportBody is the JSON body of POST /v1/report: a check's fields and the
// status; cost, when given, may be 0 (nothing used).
type reportBody struct {
	checkBody
	Status  int64 `json:"status"`
	Hold    string
	hasCost bool
	// releaseOnly: no status, a hold: the report only releases it
	// (limiter.ReleaseOnly).
	releaseOnly bool
}

// parseReport decodes one report object at p into body.
func parseReport(p *jsonwire.Parser, body *reportBody) error {
	status := false
	err := p.Object(func(field string) error {
		switch field {
		case "status":
			n, err := p.Integer()
			if err != nil {
				return fmt.Errorf("status: %w", err)
			}
			body.Status, status = n, true
			return nil
		case "hold":
			if p.Null() {
				return nil
			}
			h, err := p.Str()
			if err != nil {
				return fmt.Errorf("hold: %w", err)
			}
			if !decide.ValidHoldID(h) {
				return jsonwire.BadRequest("hold: not a hold id (the 22 characters a check answered in hold)")
			}
			body.Hold = h
			return nil
		case "cost":
			body.hasCost = p.Peek() != 'n' // null: not given
		case "reserve":
			return jsonwire.BadRequest("reserve: a check's estimate; a report gives its actual cost in cost")
		}
		return checkField(p, field, &body.checkBody)
	})
	switch {
	case err != nil:
	case !status && body.Hold == "":
		return jsonwire.BadRequest("status: required, the HTTP status the client got (%d to %d), unless the report only releases a hold", event.MinStatus, event.MaxStatus)
	case !status:
		body.releaseOnly = true
	}
	return err
}

// decodeReport validates data, the body of POST /v1/report.
func decodeReport(data []byte) (limiter.Report, error) {
	p := jsonwire.New(data)
	if p.AtEnd() {
		return limiter.Report{}, jsonwire.BadRequest("invalid JSON: empty body")
	}
	var body reportBody
	err := parseReport(&p, &body)
	if err == nil {
		err = p.End()
	}
	var in *jsonwire.InputError
	switch {
	case errors.As(err, &in):
		return limiter.Report{}, in
	case err != nil:
		return limiter.Report{}, jsonwire.BadRequest("invalid JSON: %v", err)
	}
	return validateReport(&body)
}

// decodeReportBatch validates data, the body of POST /v1/report/batch,
// {"reports": [report, ...]}: 1 to maxBatch reports, each as decodeReport
// wants it; an invalid one refuses the batch, naming its index.
func decodeReportBatch(data []byte) ([]limiter.Report, error) {
	p := jsonwire.New(data)
	if p.AtEnd() {
		return nil, jsonwire.BadRequest("invalid JSON: empty body")
	}
	var out []limiter.Report
	seen := false
	err := p.Object(func(field string) error {
		switch {
		case field != "reports":
			return fmt.Errorf("unknown field %q", field)
		case seen:
			return errors.New("reports: given twice")
		}
		seen = true
		return p.Array(func(i int) error {
			if i == maxBatch {
				return jsonwire.BadRequest("reports: at most %d per batch", maxBatch)
			}
			var body reportBody
			if err := parseReport(&p, &body); err != nil {
				return fmt.Errorf("reports[%d]: %w", i, err)
			}
			r, err := validateReport(&body)
			if err != nil {
				return jsonwire.BadRequest("reports[%d]: %v", i, err)
			}
			out = append(out, r)
			return nil
		})
	})
	if err == nil {
		err = p.End()
	}
	var in *jsonwire.InputError
	switch {
	case errors.As(err, &in): // with the index the batch wrapped it in
		return nil, jsonwire.BadRequest("%s", err.Error())
	case err != nil:
		return nil, jsonwire.BadRequest("invalid JSON: %v", err)
	case len(out) == 0:
		return nil, jsonwire.BadRequest("reports: required, 1 to %d of them", maxBatch)
	}
	return out, nil
}

// validateReport validates and normalizes one report's body: the subject as
// a check's, the status an HTTP status (or none, for a report that only
// releases its hold), the cost 0 to maxCost (1 when not given).
func validateReport(body *reportBody) (limiter.Report, error) {
	if body.releaseOnly {
		body.Status = limiter.ReleaseOnly
	} else if body.Status < event.MinStatus || body.Status > event.MaxStatus {
		return limiter.Report{}, jsonwire.BadRequest("status: must be an HTTP status, %d to %d", event.MinStatus, event.MaxStatus)
	}
	if body.Cost < 0 || body.Cost > maxCost {
		return limiter.Report{}, jsonwire.BadRequest("cost: must be between 0 and %d", maxCost)
	}
	cost := body.Cost
	if !body.hasCost {
		cost = 1
	}
	body.Cost = 1 // validateCheck's bounds; the report's own cost is set below
	req, err := validateCheck(&body.checkBody)
	if err != nil {
		return limiter.Report{}, err
	}
	req.Cost = cost
	return limiter.Report{Request: req, Status: int(body.Status), Hold: body.Hold}, nil
}

// fastReport answers POST /v1/report: 200 with what the report debited, 400
// for a body it refuses. A report is never refused for being over a limit.
func (h *handler) fastReport(ctx *fasthttp.RequestCtx) {
	c := h.decisions.Get().(*decision)
	defer h.release(c)
	r, err := decodeReport(ctx.PostBody())
	if err != nil {
		h.fastInputError(ctx, err)
		return
	}
	c.req = r.Request
	d := &c.d
	h.svc.ReportHold(ctx, &c.req, r.Status, r.Hold, d)
	var buf [256]byte
	b := appendReport(append(buf[:0], '{'), d)
	fastJSON(ctx, http.StatusOK, append(b, "}\n"...))
}

// fastReportBatch answers POST /v1/report/batch: each report's answer, in
// order, debited together (limiter.Service.ReportBatch).
func (h *handler) fastReportBatch(ctx *fasthttp.RequestCtx) {
	reports, err := decodeReportBatch(ctx.PostBody())
	if err != nil {
		h.fastInputError(ctx, err)
		return
	}
	b := h.batches.Get().(*batch)
	defer h.batches.Put(b)
	h.svc.ReportBatch(ctx, reports, &b.decided)
	b.answer = append(b.answer[:0], `{"reports":[`...)
	for i := range b.decided.Decisions {
		if i > 0 {
			b.answer = append(b.answer, ',')
		}
		b.answer = append(appendReport(append(b.answer, '{'), &b.decided.Decisions[i]), '}')
	}
	fastJSON(ctx, http.StatusOK, append(b.answer, "]}\n"...))
}

// appendReport appends the fields of a report's answer (docs/api.md "POST
// /v1/report"): its event id, the mode, and each rule it debited with what
// is left of its budget; spent is true when no unit is left (the rule's
// checks are refused). A concurrency rule whose hold the report named
// says whether it was released; a rule that reserves, whether the report
// settled its reservation, and then what it held and gave back.
func appendReport(b []byte, d *limiter.Decision) []byte {
	if d.EventID != "" { // a report that only releases its hold has no event
		b = append(b, `"event_id":"`...)
		b = append(b, d.EventID...)
		b = append(b, `",`...)
	}
	b = append(b, `"mode":"`...)
	b = append(b, d.Mode...)
	b = append(b, `","rules":[`...)
	for i, r := range d.Results {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"rule_id":"`...)
		b = append(b, d.Applied[i].Rule.ID...) // rule ids need no escapes
		b = append(b, `","limit":`...)
		b = strconv.AppendInt(b, r.Limit, 10)
		b = append(b, `,"remaining":`...)
		b = strconv.AppendInt(b, max(0, r.Remaining), 10)
		b = append(b, `,"reset_after_ms":`...)
		b = strconv.AppendInt(b, r.ResetAfter.Milliseconds(), 10)
		b = append(b, `,"spent":`...)
		b = strconv.AppendBool(b, r.Remaining <= 0)
		if d.Applied[i].Call.Release {
			b = append(b, `,"released":`...)
			b = strconv.AppendBool(b, r.Released)
		}
		if d.Applied[i].Call.Settle {
			b = append(b, `,"settled":`...)
			b = strconv.AppendBool(b, r.Settled)
			if r.Settled {
				b = append(b, `,"reserved":`...)
				b = strconv.AppendInt(b, r.Reserved, 10)
				b = append(b, `,"refunded":`...)
				b = strconv.AppendInt(b, r.Refunded, 10)
			}
		}
		b = append(b, '}')
	}
	return append(b, ']')
}
