package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sony/gobreaker/v2"
	"github.com/valyala/fasthttp"
)

// Client calls a limiter's decision API. It is safe for concurrent use;
// make one per limiter address and keep it.
type Client struct {
	cfg     Config
	hc      *fasthttp.HostClient
	auth    string // "Bearer <token>", or empty
	uris    [4]string
	breaker *gobreaker.CircuitBreaker[struct{}]
	bufs    sync.Pool // *callBuf
	stats   counters
	reports *reporter
	closed  atomic.Bool
}

// The API's paths, indexes into Client.uris.
const (
	pathCheck = iota
	pathCheckBatch
	pathReport
	pathReportBatch
)

var paths = [...]string{"/v1/check", "/v1/check/batch", "/v1/report", "/v1/report/batch"}

// callBuf is a call's scratch: the request body and the headers' copy.
type callBuf struct{ body, headers []byte }

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
	addr := u.Host
	if u.Port() == "" {
		addr += map[string]string{"http": ":80", "https": ":443"}[u.Scheme]
	}
	c := &Client{cfg: cfg, hc: &fasthttp.HostClient{
		Addr:                     addr,
		IsTLS:                    u.Scheme == "https",
		TLSConfig:                cfg.TLS,
		MaxConns:                 cfg.MaxConns,
		MaxIdleConnDuration:      30 * time.Second,
		NoDefaultUserAgentHeader: true,
		MaxResponseBodySize:      1 << 20,
		RetryIfErr:               retryOnClosedConn,
	}}
	if cfg.Token != "" {
		c.auth = "Bearer " + cfg.Token
	}
	for i, p := range paths {
		c.uris[i] = u.Scheme + "://" + u.Host + p
	}
	failures := uint32(cfg.BreakerFailures)
	c.breaker = gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        "ratewarden",
		MaxRequests: 1, // one probe while half open
		Timeout:     cfg.BreakerOpen,
		ReadyToTrip: func(n gobreaker.Counts) bool { return n.ConsecutiveFailures >= failures },
		// An answer of the API's own errors (400, 401, 413) is a limiter
		// that works: only no answer, a 5xx or a bad answer count.
		IsSuccessful: func(err error) bool {
			var e *Error
			return err == nil || (errors.As(err, &e) && e.Answered && e.Status >= 400 && e.Status < 500)
		},
	})
	c.bufs.New = func() any { return &callBuf{body: make([]byte, 0, 512), headers: make([]byte, 0, 256)} }
	c.reports = newReporter(c, cfg.ReportQueue)
	return c, nil
}

// Check asks the limiter for a decision on req. When the limiter cannot
// decide (no answer within the deadline, the breaker open, an error
// answer), it returns the failure policy's decision (Decision.Fallback
// set) together with the *Error saying why.
func (c *Client) Check(ctx context.Context, req *Request) (Decision, error) {
	c.stats.checks.Add(1)
	b := c.bufs.Get().(*callBuf)
	defer c.bufs.Put(b)
	b.body = appendCheck(b.body[:0], req)
	var d Decision
	err := c.call(ctx, "check", pathCheck, b.body, func(resp *fasthttp.Response) error {
		if err := parseDecision(resp.Body(), &d); err != nil {
			return err
		}
		d.headers, b.headers = readLimitHeaders(&resp.Header, b.headers)
		return nil
	})
	if err != nil {
		c.stats.fallbacks.Add(1)
		return c.cfg.OnFailure.decide(ctx, req), err
	}
	return d, nil
}

// CheckBatch asks for the decisions on reqs (1 to 100) in one call, as if
// made one after the other. A check the limiter could not decide (its rule
// cannot be decided without Redis) and, when the whole call fails, every
// check gets the failure policy's decision; the error says why (for the
// whole call, an *Error).
func (c *Client) CheckBatch(ctx context.Context, reqs []Request) ([]Decision, error) {
	c.stats.checks.Add(uint64(len(reqs)))
	b := c.bufs.Get().(*callBuf)
	defer c.bufs.Put(b)
	b.body = append(b.body[:0], `{"checks":[`...)
	for i := range reqs {
		if i > 0 {
			b.body = append(b.body, ',')
		}
		b.body = appendCheck(b.body, &reqs[i])
	}
	b.body = append(b.body, "]}"...)
	ds := make([]Decision, len(reqs))
	errs := make([]string, len(reqs))
	err := c.call(ctx, "check batch", pathCheckBatch, b.body, func(resp *fasthttp.Response) error {
		return parseBatch(resp.Body(), ds, errs)
	})
	var undecided []string
	for i := range ds {
		if err != nil || errs[i] != "" {
			c.stats.fallbacks.Add(1)
			ds[i] = c.cfg.OnFailure.decide(ctx, &reqs[i])
			if err == nil {
				undecided = append(undecided, fmt.Sprintf("check %d: %s", i, errs[i]))
			}
		}
	}
	if err == nil && len(undecided) > 0 {
		err = fmt.Errorf("ratewarden check batch: %d checks not decided: %v", len(undecided), undecided)
	}
	return ds, err
}

// Report sends what happened after a response and returns what the
// report spent. A report is never refused for being over a limit.
func (c *Client) Report(ctx context.Context, o *Outcome) (ReportResult, error) {
	b := c.bufs.Get().(*callBuf)
	defer c.bufs.Put(b)
	b.body = appendOutcome(b.body[:0], o)
	var r ReportResult
	err := c.call(ctx, "report", pathReport, b.body, func(resp *fasthttp.Response) error {
		return parseReportBody(resp.Body(), &r)
	})
	return r, err
}

// ReportBatch sends several outcomes (1 to 100) in one call.
func (c *Client) ReportBatch(ctx context.Context, os []Outcome) ([]ReportResult, error) {
	b := c.bufs.Get().(*callBuf)
	defer c.bufs.Put(b)
	b.body = appendOutcomes(b.body[:0], os)
	rs := make([]ReportResult, 0, len(os))
	err := c.call(ctx, "report batch", pathReportBatch, b.body, func(resp *fasthttp.Response) error {
		return parseReports(resp.Body(), len(os), &rs)
	})
	return rs, err
}

// call posts body to the API's path and hands a 200 answer in JSON to
// read, through the breaker. Its error is an *Error.
func (c *Client) call(ctx context.Context, op string, path int, body []byte, read func(*fasthttp.Response) error) error {
	if err := ctx.Err(); err != nil {
		return &Error{Op: op, Err: err}
	}
	if c.closed.Load() {
		return &Error{Op: op, Err: ErrClosed}
	}
	_, err := c.breaker.Execute(func() (struct{}, error) {
		return struct{}{}, c.roundTrip(ctx, op, path, body, read)
	})
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		c.stats.breakerOpen.Add(1)
		return &Error{Op: op, Err: ErrBreakerOpen}
	}
	return err
}

func (c *Client) roundTrip(ctx context.Context, op string, path int, body []byte, read func(*fasthttp.Response) error) error {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI(c.uris[path])
	req.Header.SetContentType("application/json")
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	req.SetBodyRaw(body)
	deadline := time.Now().Add(c.cfg.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := c.hc.DoDeadline(req, resp, deadline); err != nil {
		if errors.Is(err, fasthttp.ErrTimeout) {
			err = fmt.Errorf("%w (%v)", context.DeadlineExceeded, err)
		}
		return &Error{Op: op, Err: err}
	}
	status := resp.StatusCode()
	if status != fasthttp.StatusOK {
		return &Error{Op: op, Answered: true, Status: status, Message: errorMessage(resp.Body())}
	}
	if ct := resp.Header.ContentType(); !jsonContent(ct) {
		return &Error{Op: op, Answered: true, Status: status, Message: fmt.Sprintf("content type %q, not the API's JSON", ct)}
	}
	if err := read(resp); err != nil {
		return &Error{Op: op, Answered: true, Status: status, Message: "not the API's answer: " + err.Error()}
	}
	return nil
}

// retryOnClosedConn retries, once, a call whose kept-alive connection the
// limiter had closed (a restart, an idle timeout): sent on it, the call
// most likely never reached the limiter, and without a retry a restart
// would fail one call per pooled connection, enough to open the breaker.
// The cost: a limiter that closes the connection after counting a call
// and before answering (a crash mid-request) counts it twice.
func retryOnClosedConn(_ *fasthttp.Request, attempts int, err error) (resetTimeout, retry bool) {
	closed := errors.Is(err, io.EOF) || errors.Is(err, fasthttp.ErrConnectionClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
	return false, attempts == 1 && closed
}

// jsonContent reports whether ct is application/json, parameters aside.
func jsonContent(ct []byte) bool {
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
}

type counters struct {
	checks, fallbacks, breakerOpen             atomic.Uint64
	reportsSent, reportsDropped, reportsFailed atomic.Uint64
}

// Stats returns the client's counts.
func (c *Client) Stats() Stats {
	s := &c.stats
	return Stats{Checks: s.checks.Load(), Fallbacks: s.fallbacks.Load(), BreakerOpen: s.breakerOpen.Load(),
		ReportsSent: s.reportsSent.Load(), ReportsDropped: s.reportsDropped.Load(), ReportsFailed: s.reportsFailed.Load()}
}

// Close sends the outcomes ReportAsync holds, within ctx, and releases
// the connections. Calls after Close fail with ErrClosed.
func (c *Client) Close(ctx context.Context) error {
	err := c.reports.close(ctx)
	c.closed.Store(true)
	c.hc.CloseIdleConnections()
	return err
}
