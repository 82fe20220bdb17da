package httpapi

import (
	"bytes"
	"net/http"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/bearer"
	"github.com/ratewarden/ratewarden/internal/jsonwire"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// The JSON decision API: one check, several; and envoyproxy/ratelimit's.
const (
	checkPath = "/v1/check"
	batchPath = "/v1/check/batch"
	jsonPath  = "/json"
)

// authPathBytes is authPath, for comparisons that do not copy.
var authPathBytes = []byte(authPath)

// NewFastHandler returns the decision port's handler, served by fasthttp
// (ops.Listener's Fast): POST /v1/check, /v1/check/batch, /v1/report,
// /v1/report/batch and (with
// Config.AnswerJSON) envoyproxy/ratelimit's /json natively, and every other
// request (forward-auth, the admin API, the operational routes) to rest, a
// net/http handler such as NewHandler's, through fasthttp's adaptor. The
// gate of Config admits the decision routes.
//
// Why two servers' APIs on one port: /v1/check carries nearly all the
// decisions, and on it net/http's own cost (about 23 allocations and
// 14 µs of CPU per request on a 2-core machine) was most of the limiter's;
// fasthttp reuses its request and response objects and allocates nothing
// per request. The other routes keep net/http's handlers and their tests;
// the adaptor costs them a goroutine and a request copy each.
func NewFastHandler(cfg Config, rest http.Handler) fasthttp.RequestHandler {
	h := newHandler(cfg)
	other := fasthttpadaptor.NewFastHTTPHandler(rest)
	gate := cfg.Gate
	check, batch, report, reportBatch := h.fastCheck, h.fastBatch, h.fastReport, h.fastReportBatch // method values made once
	var answerJSON fasthttp.RequestHandler
	if cfg.AnswerJSON != nil {
		answerJSON = func(ctx *fasthttp.RequestCtx) {
			status, answer := cfg.AnswerJSON(ctx, ctx.PostBody())
			fastJSON(ctx, status, answer)
		}
	}
	return func(ctx *fasthttp.RequestCtx) {
		// Below /v1/auth/ the path is a client's (Envoy's ext_authz
		// path_prefix), and fasthttp's Path is decoded and cleaned:
		// /v1/auth/..%2freport would be /v1/report. A path sent under
		// /v1/auth is forward auth's (NewHandler) whatever it cleans to, so
		// a client never turns its check into a report or a check of a
		// subject of its choosing.
		if bytes.HasPrefix(ctx.URI().PathOriginal(), authPathBytes) {
			other(ctx)
			return
		}
		var serve fasthttp.RequestHandler
		switch string(ctx.Path()) { // compared, not copied
		case checkPath:
			serve = check
		case batchPath:
			serve = batch
		case reportPath:
			serve = report
		case reportBatchPath:
			serve = reportBatch
		case jsonPath:
			serve = answerJSON
		}
		if serve == nil {
			other(ctx)
			return
		}
		if !ctx.IsPost() {
			ctx.Response.Header.Set("Allow", http.MethodPost)
			fastError(ctx, http.StatusMethodNotAllowed, "method not allowed: use POST")
			return
		}
		if !gate.AllowsBytes(ctx.Request.Header.Peek("Authorization")) {
			gate.Refused(ctx.RemoteAddr().String(), string(ctx.Path()))
			ctx.Response.Header.Set("WWW-Authenticate", gate.Challenge())
			fastError(ctx, http.StatusUnauthorized, bearer.Message)
			return
		}
		serve(ctx)
	}
}

// fastCheck answers POST /v1/check: the decision as JSON with its headers,
// 400 for a body it refuses, 503 when a deny-policy rule cannot be decided.
func (h *handler) fastCheck(ctx *fasthttp.RequestCtx) {
	c := h.decisions.Get().(*decision)
	defer h.release(c)
	var err error
	if c.req, err = decodeCheck(ctx.PostBody()); err != nil {
		h.fastInputError(ctx, err)
		return
	}
	d := &c.d
	h.svc.Check(ctx, &c.req, d)
	if d.Unavailable {
		fastJSON(ctx, http.StatusServiceUnavailable, unavailable(d))
		return
	}
	rh := &c.rh
	rh.encode(d)
	rh.setCanonical(&ctx.Response.Header)
	var buf [384]byte // more than a decision's longest answer
	fastJSON(ctx, http.StatusOK, appendDecision(buf[:0], d))
}

// batch is what one POST /v1/check/batch or /v1/report/batch reuses from
// the last.
type batch struct {
	reqs    []rules.Request
	decided limiter.Batch
	answer  []byte
}

// fastBatch answers POST /v1/check/batch: the decisions of every check in
// order, decided together (limiter.Service.CheckBatch), 400 for a body it
// refuses. No rate-limit headers on the answer: they would describe one
// decision of several; with "headers": true, each decision carries its own.
func (h *handler) fastBatch(ctx *fasthttp.RequestCtx) {
	b := h.batches.Get().(*batch)
	defer h.batches.Put(b)
	var err error
	var headers bool
	b.reqs, headers, err = decodeBatch(ctx.PostBody(), b.reqs)
	defer clear(b.reqs) // the pool must not keep the body's strings alive
	if err != nil {
		h.fastInputError(ctx, err)
		return
	}
	h.svc.CheckBatch(ctx, b.reqs, &b.decided)
	b.answer = appendBatch(b.answer[:0], b.decided.Decisions, headers)
	fastJSON(ctx, http.StatusOK, b.answer)
}

// fastInputError answers a body decodeCheck or decodeBatch refused.
func (h *handler) fastInputError(ctx *fasthttp.RequestCtx, err error) {
	if in, ok := err.(*jsonwire.InputError); ok {
		fastError(ctx, in.Status, in.Msg)
		return
	}
	h.cfg.Log.Error("unexpected input error", zap.Error(err))
	fastError(ctx, http.StatusInternalServerError, "internal error")
}

// fastJSON answers status with a JSON body, which fasthttp copies.
func fastJSON(ctx *fasthttp.RequestCtx, status int, body []byte) {
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.Response.Header.SetCanonical(cacheControl, noStore)
	ctx.SetBody(body)
}

// cacheControl and noStore are a header written on every answer, its name
// already in fasthttp's canonical form, so that setting it costs no
// normalizing copy.
var cacheControl, noStore = []byte("Cache-Control"), []byte("no-store")

// fastError answers {"error": msg}, as writeError does.
func fastError(ctx *fasthttp.RequestCtx, status int, msg string) {
	fastJSON(ctx, status, jsonwire.ErrorBody(msg))
}
