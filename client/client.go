package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sony/gobreaker/v2"
)

// Client calls a limiter's decision API. It is safe for concurrent use;
// make one per limiter address and keep it.
type Client struct {
	cfg Config
	rt  http.RoundTripper
	// own is the client's own transport, which Close closes: nil when
	// Config.Transport is the application's.
	own     *http.Transport
	auth    []string // {"Bearer <token>"}, or nil
	urls    [4]*url.URL
	breaker *gobreaker.TwoStepCircuitBreaker[struct{}]
	checks  *checkQueue // nil: batching off (Config.DisableBatching)
	reportQ *checkQueue // the reports', likewise
	bufs    sync.Pool   // *callBuf
	stats   counters
	reports *reporter
	closed  atomic.Bool
	// conns holds a token for each call on its way to the limiter, at most
	// MaxConns (acquire).
	conns chan struct{}
}

// The API's paths, indexes into Client.uris.
const (
	pathCheck = iota
	pathCheckBatch
	pathReport
	pathReportBatch
)

var paths = [...]string{"/v1/check", "/v1/check/batch", "/v1/report", "/v1/report/batch"}

// callBuf is a call's scratch: the request body, the answer's body and
// the headers' copy.
type callBuf struct{ body, answer, headers []byte }

// reply is what the limiter answered a call: its body is the call's
// callBuf.answer.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// New returns a client of the limiter at cfg.URL. Nothing is dialed
// before the first call. Close it to send the outcomes ReportAsync holds.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return nil, fmt.Errorf("ratewarden client: URL %q: want http://host:port or https://host:port", cfg.URL)
	}
	if cfg.TLS != nil && u.Scheme != "https" {
		return nil, fmt.Errorf("ratewarden client: TLS set for the %s URL %q", u.Scheme, cfg.URL)
	}
	if cfg.TLS != nil && cfg.Transport != nil {
		return nil, errors.New("ratewarden client: TLS and Transport both set: the TLS of a Transport is its own")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = defaultTimeout
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = defaultMaxConns
	}
	if cfg.BreakerFailures <= 0 {
		cfg.BreakerFailures = defaultBreakerFailures
	}
	if cfg.BreakerOpen <= 0 {
		cfg.BreakerOpen = defaultBreakerOpen
	}
	if cfg.ReportQueue <= 0 {
		cfg.ReportQueue = defaultReportQueue
	}
	c := &Client{cfg: cfg, rt: cfg.Transport, conns: make(chan struct{}, cfg.MaxConns)}
	if c.rt == nil {
		c.own = &http.Transport{
			DialContext:         (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext,
			TLSClientConfig:     cfg.TLS,
			MaxConnsPerHost:     cfg.MaxConns,
			MaxIdleConnsPerHost: cfg.MaxConns,
			IdleConnTimeout:     30 * time.Second,
			// The API's JSON is small: sent and read as it is, over
			// HTTP/1.1 keep-alive connections, one call on each.
			DisableCompression: true,
			TLSNextProto:       map[string]func(string, *tls.Conn) http.RoundTripper{},
		}
		c.rt = c.own
	}
	if cfg.Token != "" {
		c.auth = []string{"Bearer " + cfg.Token}
	}
	for i, p := range paths {
		c.urls[i] = &url.URL{Scheme: u.Scheme, Host: u.Host, Path: p}
	}
	failures := uint32(cfg.BreakerFailures)
	c.breaker = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        "ratewarden",
		MaxRequests: 1, // one probe while half open
		Timeout:     cfg.BreakerOpen,
		ReadyToTrip: func(n gobreaker.Counts) bool { return n.ConsecutiveFailures >= failures },
		// A refusal of the request itself, or by a deny rule the limiter
		// could not decide, is the answer of a limiter that works;
		// everything else that is not a success fails the call
		// (Config.BreakerFailures), a refused token included: the client
		// gets no decision from this limiter until its token is fixed.
		IsSuccessful: func(err error) bool {
			return err == nil || errors.Is(err, ErrInvalid) || errors.Is(err, ErrUndecidable)
		},
	})
	c.bufs.New = func() any {
		return &callBuf{body: make([]byte, 0, 512), answer: make([]byte, 0, 512), headers: make([]byte, 0, 256)}
	}
	c.reports = newReporter(c, cfg.ReportQueue)
	if !cfg.DisableBatching {
		if cfg.BatchWait <= 0 {
			cfg.BatchWait = defaultBatchWait
		}
		c.cfg.BatchWait = cfg.BatchWait
		c.checks = newCheckQueue(c, cfg.BatchWait)
		c.reportQ = newCheckQueue(c, cfg.BatchWait)
	}
	return c, nil
}

// Check asks the limiter for a decision on req. The round trip is bounded
// by Config.Timeout, not by ctx: a caller whose context ends meanwhile
// still gets the limiter's decision. Only the wait for a free connection
// (Config.MaxConns) ends with ctx. When the limiter does not decide, Check
// returns, with the *Error saying why:
//   - a refusal (ReasonInvalid) when the limiter refused req as invalid,
//     or the client would not send it (errors.Is(err, ErrInvalid));
//   - a refusal (ReasonUndecidable, RuleID set) when the limiter could not
//     decide a rule whose failure policy is deny and refused req by that
//     policy (errors.Is(err, ErrUndecidable));
//   - a refusal (ReasonCallerGone) when ctx had ended by then
//     (errors.Is(err, ErrCallerGone)): the failure policy would admit a
//     request whose client went away on purpose;
//   - else the failure policy's decision (Decision.Fallback set): no
//     answer within the timeout, no connection free within it, the
//     breaker open, an error answer, the client's token refused
//     (errors.Is(err, ErrUnauthorized)).
//
// Concurrent checks share calls (see Config.DisableBatching): a check that
// arrives while another call is on its way may wait, Config.BatchWait at
// most, to go with the checks that arrive meanwhile, and a caller whose
// ctx ends during that wait is refused (ReasonCallerGone), its check not
// sent. Each gets what its own call would have given it.
func (c *Client) Check(ctx context.Context, req *Request) (Decision, error) {
	c.stats.checks.Add(1)
	if c.checks != nil {
		return c.checks.check(ctx, req)
	}
	return c.checkOne(ctx, req)
}

// undecided returns the decision on a check the limiter did not decide
// for err (see Check), and counts it.
func (c *Client) undecided(ctx context.Context, req *Request, err error) Decision {
	e, _ := err.(*Error)
	switch {
	case errors.Is(err, ErrInvalid):
		c.stats.invalid.Add(1)
		return Decision{Reason: ReasonInvalid}
	case e != nil && e.denyRule != "":
		return c.ruleRefusal(e.denyRule)
	case ctx.Err() != nil:
		c.stats.callerGone.Add(1)
		if e != nil {
			e.callerGone = context.Cause(ctx)
		}
		return Decision{Reason: ReasonCallerGone}
	}
	c.stats.fallbacks.Add(1)
	return c.cfg.OnFailure.decide(ctx, req)
}

// ruleRefusal returns the refusal of a check by rule, whose failure policy
// is deny and which the limiter could not decide, and counts it. The
// limiter gives no time to wait; a second is what FailClosed's refusals
// say.
func (c *Client) ruleRefusal(rule string) Decision {
	c.stats.undecidable.Add(1)
	return Decision{Reason: ReasonUndecidable, RuleID: rule, RetryAfter: time.Second}
}

// failed hands the error of an op to Config.OnError.
func (c *Client) failed(op string, err error) {
	if c.cfg.OnError != nil {
		c.cfg.OnError(op, err)
	}
}

// CheckBatch asks for the decisions on reqs, as if made one after the
// other: in one call, or, beyond 100 checks or the API's 64 KiB of body,
// in several, in order. A check that is not decided gets what
// Check gives it: a refusal when it is invalid, when the limiter's entry
// for it is the refusal of a deny rule it could not decide
// (ReasonUndecidable), or when its caller had gone; else the failure
// policy's decision (a call that fails, for every check of the call; an
// entry that is another error). The error says why (for a whole call, its
// *Error; errors.Is(err, ErrUndecidable) when a rule refused a check).
func (c *Client) CheckBatch(ctx context.Context, reqs []Request) ([]Decision, error) {
	c.stats.checks.Add(uint64(len(reqs)))
	b := c.bufs.Get().(*callBuf)
	defer c.bufs.Put(b)
	ds := make([]Decision, len(reqs))
	errs := make([]batchError, len(reqs))
	var callErr error // the first call's that failed
	for start := 0; start < len(reqs); {
		var end int
		b.body, end = appendChecks(b.body[:0], reqs, start)
		err := c.call(ctx, "check batch", pathCheckBatch, b, func(a *reply) error {
			return parseBatch(a.body, ds[start:end], errs[start:end])
		})
		if err != nil {
			for i := start; i < end; i++ {
				ds[i] = c.undecided(ctx, &reqs[i], err)
			}
			if callErr == nil {
				callErr = err
			}
		}
		start = end
	}
	if callErr != nil {
		c.failed("check batch", callErr)
		return ds, callErr
	}
	var undecided []string
	for i := range ds {
		if errs[i].msg != "" {
			undecided = append(undecided, fmt.Sprintf("check %d: %s", i, errs[i].msg))
		}
	}
	if len(undecided) == 0 {
		return ds, nil
	}
	err := &Error{Op: "check batch", Err: fmt.Errorf("%d checks not decided: %v", len(undecided), undecided)}
	var denyRule string
	for i := range ds {
		switch {
		case errs[i].msg == "":
		case errs[i].denyRule:
			denyRule = ds[i].RuleID
			ds[i] = c.ruleRefusal(denyRule)
		default:
			ds[i] = c.undecided(ctx, &reqs[i], err)
		}
	}
	err.denyRule = denyRule // only now: the other checks are the failure policy's
	c.failed("check batch", err)
	return ds, err
}

// appendChecks appends the body of POST /v1/check/batch with reqs from
// start on, as many as fit in the API's maxBody (at least one, which the
// call refuses when it alone is over), and returns it with the index after
// the last.
func appendChecks(b []byte, reqs []Request, start int) ([]byte, int) {
	b = append(b, `{"checks":[`...)
	end := start
	for end < len(reqs) && end-start < maxBatch {
		n := len(b)
		if end > start {
			b = append(b, ',')
		}
		b = appendCheck(b, &reqs[end])
		if end > start && len(b)+len("]}") > maxBody {
			b = b[:n]
			break
		}
		end++
	}
	return append(b, "]}"...), end
}

// Report sends what happened after a response and returns what the
// report spent. A report is never refused for being over a limit. With
// o.Hold set, it also releases that hold (Budget.Released says whether it
// ended one); a malformed hold is refused (ErrInvalid) without a call. The
// call, its wait for a connection included, is bounded by Config.Timeout,
// not by ctx.
//
// Concurrent reports share calls as checks do (Config.DisableBatching): a
// report that arrives while another is on its way may wait, BatchWait at
// most, to go with those arriving meanwhile in one POST /v1/report/batch;
// each gets its own answer, and an outcome the limiter would refuse goes
// alone.
func (c *Client) Report(ctx context.Context, o *Outcome) (ReportResult, error) {
	if badHold(o.Hold) {
		err := holdRefused("report", "hold")
		c.failed("report", err)
		return ReportResult{}, err
	}
	if c.reportQ != nil {
		return c.reportQ.report(o)
	}
	return c.reportOne(o)
}

// ReportBatch sends several outcomes (1 to 100) in one call. The limiter
// refuses the whole batch for one invalid outcome (ReportAsync checks
// them first; ReportBatch checks their holds, and refuses the batch
// without a call for a malformed one). As Report, it is bounded by Config.Timeout, not by ctx.
func (c *Client) ReportBatch(ctx context.Context, os []Outcome) ([]ReportResult, error) {
	for i := range os {
		if badHold(os[i].Hold) {
			err := holdRefused("report batch", fmt.Sprintf("outcome %d: hold", i))
			c.failed("report batch", err)
			return nil, err
		}
	}
	b := c.bufs.Get().(*callBuf)
	defer c.bufs.Put(b)
	b.body = appendOutcomes(b.body[:0], os)
	rs, err := c.reportBatch(b, len(os))
	if err != nil {
		c.failed("report batch", err)
	}
	return rs, err
}

// reportBatch posts b.body, the body of POST /v1/report/batch with n
// outcomes.
func (c *Client) reportBatch(b *callBuf, n int) ([]ReportResult, error) {
	rs := make([]ReportResult, 0, n)
	err := c.call(context.Background(), "report batch", pathReportBatch, b, func(a *reply) error {
		return parseReports(a.body, n, &rs)
	})
	return rs, err
}

// Ping asks the limiter whether it answers and accepts the client's
// credentials, with a call that decides and counts nothing (an empty
// batch of checks, which the limiter refuses once it has accepted the
// token): nil when it does; else an *Error, errors.Is(err,
// ErrUnauthorized) when it refused the token. The way for
// an application to refuse to start with a wrong token. It is bounded by
// ctx and Config.Timeout, and bypasses the breaker.
func (c *Client) Ping(ctx context.Context) error {
	if c.closed.Load() {
		return &Error{Op: "ping", Err: ErrClosed}
	}
	if err := c.acquire(ctx); err != nil {
		return &Error{Op: "ping", Err: err}
	}
	defer c.release()
	deadline := time.Now().Add(c.cfg.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	b := c.bufs.Get().(*callBuf)
	defer c.bufs.Put(b)
	b.body = append(b.body[:0], `{"checks":[]}`...)
	a, err := c.post(pathCheckBatch, b, deadline)
	if err != nil {
		return &Error{Op: "ping", Err: err}
	}
	status := a.status
	if (status == http.StatusOK || status == http.StatusBadRequest) && jsonContent(a.header.Get("Content-Type")) {
		return nil // the API's answer (its refusal of an empty batch), not a proxy's page
	}
	if refusesCredentials(status) {
		c.stats.unauthorized.Add(1)
	}
	msg, _ := errorAnswer(a.body)
	return &Error{Op: "ping", Answered: true, Status: status, Message: msg}
}

// call posts b.body to the API's path and hands a 200 answer in JSON to
// read, through the breaker. Its wait for a connection (acquire) and its
// round trip are each bounded by Config.Timeout, the wait also by ctx. Its
// error is an *Error.
func (c *Client) call(ctx context.Context, op string, path int, b *callBuf, read func(*reply) error) error {
	if c.closed.Load() {
		return &Error{Op: op, Err: ErrClosed}
	}
	if len(b.body) > maxBody {
		// The limiter would refuse it (413) once sent: refused here, at no
		// cost to either side.
		return &Error{Op: op, Err: fmt.Errorf("%w: a body of %d bytes, over the API's %d", ErrInvalid, len(b.body), maxBody)}
	}
	// The wait for a connection is outside the breaker, which counts what
	// the limiter does.
	if err := c.acquire(ctx); err != nil {
		return &Error{Op: op, Err: err}
	}
	defer c.release()
	done, err := c.breaker.Allow()
	if err != nil { // open, or half open with its probe on its way
		c.stats.breakerOpen.Add(1)
		return &Error{Op: op, Err: ErrBreakerOpen}
	}
	return c.guarded(done, func() error {
		return c.roundTrip(op, path, b, time.Now().Add(c.cfg.Timeout), read)
	})
}

// errBusy is the cause of a call that found every connection to the
// limiter busy (Config.MaxConns) for its Timeout, or until its caller went
// away: the limiter was not asked, and the breaker does not hear of it.
var errBusy = errors.New("every connection to the limiter busy")

// acquire takes one of the MaxConns connections for a call, waiting for one
// for Timeout at most, and no longer than ctx lasts. The round trip that
// follows ignores ctx; the wait must not: a server goes on serving a
// request after its client has gone, so the checks of callers that left
// at once (a flood of requests, each abandoned as it is sent) would
// otherwise queue for the limiter, each for a whole Timeout, ahead of the
// checks of callers still there. A check whose caller has gone is decided
// when a connection is free, and refused (ReasonCallerGone) when none is.
// The error wraps errBusy, and context.DeadlineExceeded when Timeout
// passed.
func (c *Client) acquire(ctx context.Context) error {
	select {
	case c.conns <- struct{}{}:
		return nil
	default:
	}
	if ctx.Err() != nil {
		return errBusy
	}
	timer := time.NewTimer(c.cfg.Timeout)
	defer timer.Stop()
	select {
	case c.conns <- struct{}{}:
		return nil
	case <-ctx.Done():
		return errBusy
	case <-timer.C:
		return fmt.Errorf("%w: %w", context.DeadlineExceeded, errBusy)
	}
}

// release gives back the connection acquire took.
func (c *Client) release() { <-c.conns }

// roundTrip posts b.body to the API's path and hands a 200 answer in JSON
// to read. Its error is an *Error.
func (c *Client) roundTrip(op string, path int, b *callBuf, deadline time.Time, read func(*reply) error) error {
	a, err := c.post(path, b, deadline)
	if err != nil {
		return &Error{Op: op, Err: err}
	}
	status := a.status
	if status != http.StatusOK {
		if refusesCredentials(status) {
			c.stats.unauthorized.Add(1)
		}
		msg, denyRule := errorAnswer(a.body)
		if status != http.StatusServiceUnavailable || !jsonContent(a.header.Get("Content-Type")) {
			denyRule = "" // not the limiter's refusal by a deny rule, whatever the body says
		}
		return &Error{Op: op, Answered: true, Status: status, Message: msg, denyRule: denyRule}
	}
	if ct := a.header.Get("Content-Type"); !jsonContent(ct) {
		return &Error{Op: op, Answered: true, Status: status, Message: fmt.Sprintf("content type %q, not the API's JSON", ct)}
	}
	if err := read(&a); err != nil {
		return &Error{Op: op, Answered: true, Status: status, Message: "not the API's answer: " + err.Error()}
	}
	return nil
}

// maxAnswer bounds the body of an answer the client reads: the API's are
// far smaller, and a proxy's page could be anything.
const maxAnswer = 1 << 20

// errAnswerTooLarge is the cause of a call whose answer was over maxAnswer.
var errAnswerTooLarge = fmt.Errorf("an answer over %d bytes", maxAnswer)

// post sends b.body to the API's path, by the deadline, and reads the
// answer, its body into b.answer. A call whose kept-alive connection the
// limiter had closed (a restart, an idle timeout) is sent again, once, on
// another: sent on it, the call most likely never reached the limiter, and
// without a retry a restart would fail one call per pooled connection,
// enough to open the breaker. The cost: a limiter that closes the
// connection after counting a call and before answering (a crash
// mid-request) counts it twice. The request also has an Idempotency-Key
// entry without a value, which net/http does not send but takes as leave
// to retry such a call itself, where it can tell.
func (c *Client) post(path int, b *callBuf, deadline time.Time) (reply, error) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	body := &sentBody{b: b.body}
	body.Reset(b.body)
	defer body.release(b)
	header := http.Header{
		"Content-Type":    contentJSON,
		"User-Agent":      noUserAgent,
		"Idempotency-Key": nil,
	}
	if c.auth != nil {
		header["Authorization"] = c.auth
	}
	var resp *http.Response
	var err error
	for attempt := 1; ; attempt++ {
		req := &http.Request{
			Method:        http.MethodPost,
			URL:           c.urls[path],
			Host:          c.urls[path].Host,
			Proto:         "HTTP/1.1",
			ProtoMajor:    1,
			ProtoMinor:    1,
			Header:        header,
			Body:          body,
			GetBody:       body.again,
			ContentLength: int64(len(b.body)),
		}
		if attempt > 1 {
			req.Body, _ = body.again()
		}
		resp, err = c.rt.RoundTrip(req.WithContext(ctx))
		if err == nil || attempt > 1 || !closedConn(err) || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b.answer, err = readAnswer(resp.Body, b.answer[:0])
	if err != nil {
		return reply{}, err
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b.answer}, nil
}

// closedConn reports whether err is that of a connection the other side
// had closed: read as such (EOF, reset, broken pipe), or found closed by
// net/http's transport, which closes a kept-alive connection when it reads
// the peer's close, and can hand it to a request just before
// (net.ErrClosed, "use of closed network connection").
func closedConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

// The request headers every call shares; a transport only reads them.
var (
	contentJSON = []string{"application/json"}
	noUserAgent = []string{""} // net/http sends none
)

// readAnswer reads r into buf, up to maxAnswer.
func readAnswer(r io.Reader, buf []byte) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if len(buf) > maxAnswer {
			return buf, errAnswerTooLarge
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// sentBody is a call's request body, read from the call's buffer. A
// transport may still read it once RoundTrip has returned (a limiter
// that answered before it had read the request); it closes it when it
// has done: until every copy is closed, the buffer is not the call's to
// reuse.
type sentBody struct {
	bytes.Reader
	b    []byte
	open atomic.Int32 // copies handed out and not closed, less one
}

// Close marks the first copy closed.
func (s *sentBody) Close() error { s.open.Add(-1); return nil }

// again is http.Request.GetBody: another copy, for a retry.
func (s *sentBody) again() (io.ReadCloser, error) {
	s.open.Add(1)
	return &bodyCopy{Reader: bytes.NewReader(s.b), open: &s.open}, nil
}

// release takes the call's buffer off the call, for a new one, when a
// copy of the body may still be read.
func (s *sentBody) release(b *callBuf) {
	if s.open.Load() != -1 {
		b.body = make([]byte, 0, cap(b.body))
	}
}

// bodyCopy is a retry's copy of a sentBody.
type bodyCopy struct {
	*bytes.Reader
	open *atomic.Int32
}

func (c *bodyCopy) Close() error { c.open.Add(-1); return nil }

// jsonContent reports whether ct is application/json, parameters aside.
func jsonContent(ct string) bool {
	const want = "application/json"
	return len(ct) >= len(want) && string(ct[:len(want)]) == want && (len(ct) == len(want) || ct[len(want)] == ';')
}

// Stats are what a Client counted since it was made.
type Stats struct {
	// Checks counts the checks asked for (a batch counts each).
	Checks uint64
	// Fallbacks counts the checks the failure policy decided.
	Fallbacks uint64
	// BreakerOpen counts the calls not made because the breaker was open.
	BreakerOpen uint64
	// ReportsSent, ReportsDropped and ReportsFailed count the outcomes of
	// ReportAsync: sent, dropped because the queue was full or the client
	// closed, or lost with a call that failed.
	ReportsSent, ReportsDropped, ReportsFailed uint64
	// Invalid counts the checks refused as invalid (ReasonInvalid): by the
	// limiter, or not sent by the client.
	Invalid uint64
	// CallerGone counts the checks refused because the limiter could not
	// decide them after their caller had gone (ReasonCallerGone).
	CallerGone uint64
	// Undecidable counts the checks the limiter refused because a rule
	// whose failure policy is deny could not be decided
	// (ReasonUndecidable): its Redis is down.
	Undecidable uint64
	// Unauthorized counts the calls (checks, reports, pings) the limiter
	// answered 401 or 403: the client's credentials refused. Any
	// is a misconfiguration to alert on.
	Unauthorized uint64
	// ReportsInvalid counts the outcomes of ReportAsync refused as invalid,
	// by ReportAsync (a status outside 100-599, a cost out of bounds, no
	// valid IP, no endpoint, a malformed hold) or by the limiter.
	ReportsInvalid uint64
	// HoldsSent counts the holds released by outcomes of ReportAsync
	// (Outcome.Hold; Middleware's and the interceptors' releases) that the
	// limiter received. HoldsLost counts those it did not: refused, dropped
	// or lost with their call, each also counted above. A lost release
	// keeps its slot taken until the rule's hold lifetime has passed: a
	// HoldsLost that grows while the limiter is up (the queue full) shows
	// concurrency limits admitting fewer requests than they allow.
	HoldsSent, HoldsLost uint64
}

type counters struct {
	checks, fallbacks, breakerOpen                             atomic.Uint64
	reportsSent, reportsDropped, reportsFailed, reportsInvalid atomic.Uint64
	invalid, callerGone, unauthorized, undecidable             atomic.Uint64
	holdsSent, holdsLost                                       atomic.Uint64
}

// Stats returns the client's counts.
func (c *Client) Stats() Stats {
	s := &c.stats
	return Stats{Checks: s.checks.Load(), Fallbacks: s.fallbacks.Load(), BreakerOpen: s.breakerOpen.Load(),
		ReportsSent: s.reportsSent.Load(), ReportsDropped: s.reportsDropped.Load(), ReportsFailed: s.reportsFailed.Load(),
		Invalid: s.invalid.Load(), CallerGone: s.callerGone.Load(), Unauthorized: s.unauthorized.Load(), Undecidable: s.undecidable.Load(),
		ReportsInvalid: s.reportsInvalid.Load(), HoldsSent: s.holdsSent.Load(), HoldsLost: s.holdsLost.Load()}
}

// Close sends the outcomes ReportAsync holds, within ctx, and releases
// the connections. Calls after Close fail with ErrClosed.
func (c *Client) Close(ctx context.Context) error {
	err := c.reports.close(ctx)
	c.closed.Store(true)
	if c.own != nil {
		c.own.CloseIdleConnections()
	}
	return err
}
