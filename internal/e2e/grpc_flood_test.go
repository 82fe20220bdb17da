package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/metadata"

	"github.com/ratewarden/ratewarden/internal/testkit"
)

// floodRSSBound is the resident memory the limiter must stay under while an
// unauthenticated caller holds 2 connections of 200 streams, each opened
// with about 1 MiB of metadata (issue 31): today's main reached 455 MB.
const floodRSSBound = 150 << 20

const shouldRateLimitPath = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// With API_TOKENS set, a caller without a token opens 2 HTTP/2 connections
// to the gRPC listener and on each 200 streams, and never sends a request
// message (issue 31). Streams whose HEADERS and CONTINUATION frames carry
// about 1 MiB of metadata are over the header list bound: the first closes
// the connection. Under the bound, a connection with more than 4 calls
// without a token in flight is closed, and so is one with more than 4
// health calls (which need no token); up to 4 calls without a token end
// after a second. Throughout, the limiter's resident memory stays under
// 150 MB and a call with a token answers.
func TestUnauthenticatedGRPCFloodIsBounded(t *testing.T) {
	e := newEnv(t)
	lim := e.start("limiter", "API_TOKENS", apiTokenNew)
	pid := lim.cmd.Process.Pid
	t.Logf("RSS %d MB at start", residentBytes(t, pid)>>20)
	const conns = 2
	flood := func(t *testing.T, streams int, block []byte) []*h2Conn {
		attackers := make([]*h2Conn, conns)
		var wg sync.WaitGroup
		for i := range attackers {
			attackers[i] = dialH2(t, lim.grpcAddr)
			c := attackers[i]
			wg.Go(func() { c.openStreams(streams, block) })
		}
		wg.Wait()
		// A PING answered means the limiter has read every frame before it
		// (frames are read in order); a connection it closed has nothing
		// more to read. The bound is functional, not a timing.
		for _, c := range attackers {
			c.settle(t, 60*time.Second)
		}
		rss := residentBytes(t, pid)
		for i, c := range attackers {
			t.Logf("connection %d: %s", i, c.summary())
		}
		t.Logf("RSS %d MB with %d×%d streams", rss>>20, conns, streams)
		if rss > floodRSSBound {
			t.Errorf("RSS %d MB, want under %d MB: the unauthenticated streams' metadata is held", rss>>20, floodRSSBound>>20)
		}
		authenticatedCallAnswers(t, lim)
		return attackers
	}
	wantClosed := func(t *testing.T, attackers []*h2Conn) {
		t.Helper()
		for i, c := range attackers {
			// Generous: the limiter closes it as it reads the stream past
			// the bound, which settle has seen it read.
			testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("connection %d closed", i), c.closed)
		}
	}

	t.Run("1 MiB of metadata a stream", func(t *testing.T) {
		wantClosed(t, flood(t, 200, headerBlock(t, shouldRateLimitPath, 1<<20, "")))
	})
	t.Run("metadata under the header limit", func(t *testing.T) {
		wantClosed(t, flood(t, 200, headerBlock(t, shouldRateLimitPath, 12<<10, "")))
	})
	t.Run("health calls with metadata under the limit", func(t *testing.T) {
		wantClosed(t, flood(t, 200, headerBlock(t, "/grpc.health.v1.Health/Check", 12<<10, "")))
	})
	t.Run("a few calls without a token", func(t *testing.T) {
		for i, c := range flood(t, 4, headerBlock(t, shouldRateLimitPath, 12<<10, "")) {
			// Generous: each ends after about a second.
			testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("connection %d's streams to end", i), func() bool { return c.accepted() == 0 })
			t.Logf("connection %d: %s", i, c.summary())
			if n := c.endedWith("grpc-status 4"); n != 4 || c.closed() {
				t.Errorf("connection %d: %d of 4 calls ended DeadlineExceeded, want all, on a connection left open", i, n)
			}
		}
	})
	t.Run("early refusals never read", func(t *testing.T) {
		n := refusalsUnread(t, lim.grpcAddr, 10*time.Second)
		rss := residentBytes(t, pid)
		t.Logf("RSS %d MB after %d calls refused early, their answers unread", rss>>20, n)
		if rss > floodRSSBound {
			t.Errorf("RSS %d MB, want under %d MB: the unread refusals are queued", rss>>20, floodRSSBound>>20)
		}
		authenticatedCallAnswers(t, lim)
	})
}

// refusalsUnread sends, for at most d, HEADERS frames of 5 bytes each
// opening a call grpc-go refuses before it reaches the service (its
// content-type is not gRPC's), and never reads the answers. It stops
// when a write has been blocked for 2 s: the limiter has stopped reading.
// It returns the number of calls sent.
func refusalsUnread(t *testing.T, addr string, d time.Duration) int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w := bufio.NewWriter(c)
	fr := http2.NewFramer(w, nil)
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	encode := func() []byte {
		block.Reset()
		for _, f := range []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
			{Name: ":path", Value: shouldRateLimitPath}, {Name: ":authority", Value: "limiter"}, {Name: "content-type", Value: "text/plain"}} {
			if err := enc.WriteField(f); err != nil {
				t.Fatal(err)
			}
		}
		return bytes.Clone(block.Bytes())
	}
	first, next := encode(), encode() // next refers to the dynamic table first filled
	_, err = w.WriteString(http2.ClientPreface)
	if err == nil {
		err = fr.WriteSettings()
	}
	if err == nil {
		err = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: first, EndStream: true, EndHeaders: true})
	}
	n := 1
	for end := time.Now().Add(d); err == nil && time.Now().Before(end); {
		for range 1000 {
			err = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*n + 1), BlockFragment: next, EndStream: true, EndHeaders: true})
			n++
		}
		_ = c.SetWriteDeadline(time.Now().Add(2 * time.Second))
		if err == nil {
			err = w.Flush()
		}
	}
	t.Logf("stopped after %d calls: %v", n, err)
	return n
}

// authenticatedCallAnswers: a call with the token answers, with a
// generous deadline.
func authenticatedCallAnswers(t *testing.T, lim *proc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+apiTokenNew)
	if _, err := rlsClient(t, lim).ShouldRateLimit(ctx, rlsRequest("flood", "remote_address=198.51.100.9")); err != nil {
		t.Errorf("an authenticated call during the flood: %v", err)
	}
}

// headerBlock is the HPACK block of a gRPC request's headers for path,
// with authorization auth when not empty, padded with about pad bytes of
// metadata. Every field is a never-indexed literal, so the block leaves
// no state in the decoder and may be sent again on any stream.
func headerBlock(t *testing.T, path string, pad int, auth string) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	fields := []hpack.HeaderField{
		{Name: ":method", Value: "POST"},
		{Name: ":scheme", Value: "http"},
		{Name: ":path", Value: path},
		{Name: ":authority", Value: "limiter"},
		{Name: "content-type", Value: "application/grpc"},
		{Name: "te", Value: "trailers"},
	}
	if auth != "" {
		fields = append(fields, hpack.HeaderField{Name: "authorization", Value: auth})
	}
	const chunk = 8 << 10
	value := strings.Repeat("0123456789abcdef", chunk/16)
	for i := 0; pad > 0; i++ {
		v := value[:min(chunk, pad)]
		fields = append(fields, hpack.HeaderField{Name: fmt.Sprintf("x-pad-%d", i), Value: v})
		pad -= len(v)
	}
	for _, f := range fields {
		f.Sensitive = true
		if err := enc.WriteField(f); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// h2Conn is a raw HTTP/2 client connection, for what no well-behaved client
// sends. A goroutine reads the server's frames and records how each stream
// ended.
type h2Conn struct {
	c net.Conn

	wmu sync.Mutex // guards w and wfr
	w   *bufio.Writer
	wfr *http2.Framer

	mu      sync.Mutex
	opened  int               // streams whose headers were written whole
	ended   map[uint32]string // stream → "grpc-status N" or "RST_STREAM code"
	goAway  string            // the GOAWAY received, if any
	readErr error             // why reading stopped, once it has
	pingAck chan struct{}
	done    chan struct{} // closed when reading stops
}

// dialH2 connects to addr and sends the connection preface and SETTINGS.
func dialH2(t *testing.T, addr string) *h2Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	h := &h2Conn{c: c, w: bufio.NewWriterSize(c, 64<<10), ended: map[uint32]string{},
		pingAck: make(chan struct{}, 1), done: make(chan struct{})}
	t.Cleanup(func() { c.Close(); <-h.done })
	h.wfr = http2.NewFramer(h.w, nil)
	if _, err := h.w.WriteString(http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := h.wfr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	if err := h.w.Flush(); err != nil {
		t.Fatal(err)
	}
	go h.read()
	return h
}

// openStreams opens n streams, each with the header block, split into a
// HEADERS frame and CONTINUATION frames of 16 KiB; it sends no DATA, and
// stops when the server has closed the connection.
func (h *h2Conn) openStreams(n int, block []byte) {
	const frame = 16 << 10 // the default SETTINGS_MAX_FRAME_SIZE
	for i := range n {
		id := uint32(2*i + 1)
		h.wmu.Lock()
		rest := block
		first := rest[:min(frame, len(rest))]
		rest = rest[len(first):]
		err := h.wfr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndHeaders: len(rest) == 0})
		for err == nil && len(rest) > 0 {
			frag := rest[:min(frame, len(rest))]
			rest = rest[len(frag):]
			err = h.wfr.WriteContinuation(id, len(rest) == 0, frag)
		}
		if err == nil {
			err = h.w.Flush()
		}
		h.wmu.Unlock()
		if err != nil {
			return // closed by the server
		}
		h.mu.Lock()
		h.opened++
		h.mu.Unlock()
	}
}

// read records the server's answers until the connection ends.
func (h *h2Conn) read() {
	defer close(h.done)
	fr := http2.NewFramer(nil, bufio.NewReader(h.c))
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = 1 << 20
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			h.mu.Lock()
			h.readErr = err
			h.mu.Unlock()
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				h.wmu.Lock()
				if h.wfr.WriteSettingsAck() == nil {
					_ = h.w.Flush()
				}
				h.wmu.Unlock()
			}
		case *http2.PingFrame:
			if f.IsAck() {
				select {
				case h.pingAck <- struct{}{}:
				default:
				}
			}
		case *http2.MetaHeadersFrame:
			if s := f.PseudoValue("status"); s != "" || f.StreamEnded() {
				if v := headerValue(f, "grpc-status"); v != "" {
					h.end(f.StreamID, "grpc-status "+v)
				}
			}
		case *http2.RSTStreamFrame:
			h.end(f.StreamID, "RST_STREAM "+f.ErrCode.String())
		case *http2.GoAwayFrame:
			h.mu.Lock()
			h.goAway = fmt.Sprintf("GOAWAY %s last stream %d %q", f.ErrCode, f.LastStreamID, f.DebugData())
			h.mu.Unlock()
		}
	}
}

func headerValue(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.Fields {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

// end records the first way stream id ended.
func (h *h2Conn) end(id uint32, how string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.ended[id]; !ok {
		h.ended[id] = how
	}
}

// settle waits until the server has read everything sent on h: it answers
// a PING, or it has closed the connection.
func (h *h2Conn) settle(t *testing.T, timeout time.Duration) {
	t.Helper()
	h.wmu.Lock()
	err := h.wfr.WritePing(false, [8]byte{'s', 'e', 't', 't', 'l', 'e'})
	if err == nil {
		err = h.w.Flush()
	}
	h.wmu.Unlock()
	if err != nil {
		return // closed
	}
	select {
	case <-h.pingAck:
	case <-h.done:
	case <-time.After(timeout):
		t.Fatalf("no PING answer after %v, connection still open: %s", timeout, h.summary())
	}
}

// accepted is the number of streams opened whole that the server neither
// answered nor reset, on a connection still open.
func (h *h2Conn) accepted() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.done:
		return 0
	default:
	}
	n := h.opened
	for id := range h.ended {
		if int(id) < 2*h.opened {
			n--
		}
	}
	return n
}

// closed reports whether the connection has ended.
func (h *h2Conn) closed() bool {
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

// endedWith is the number of streams that ended how.
func (h *h2Conn) endedWith(how string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, v := range h.ended {
		if v == how {
			n++
		}
	}
	return n
}

// summary says how the streams of h ended.
func (h *h2Conn) summary() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	how := map[string]int{}
	for _, v := range h.ended {
		how[v]++
	}
	state := "open"
	if h.readErr != nil {
		state = "closed (" + h.readErr.Error() + ")"
	}
	return "opened " + strconv.Itoa(h.opened) + " streams, ended " + fmt.Sprint(how) + ", " + h.goAway + ", " + state
}
