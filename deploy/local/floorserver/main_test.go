package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// recorded is an answer of the limiter's as `curl -si` prints it.
const recorded = "HTTP/1.1 429 Too Many Requests\r\n" +
	"Date: Mon, 01 Jan 2001 00:00:00 GMT\r\n" +
	"Content-Type: application/json\r\n" +
	"Content-Length: 27\r\n" +
	"Ratelimit: \"bench-fw/1s\";r=0;t=1\r\n" +
	"Retry-After: 1\r\n" +
	"\r\n" +
	`{"allowed":false,"limit":5}`

func TestServesTheRecordedAnswer(t *testing.T) {
	addr, stop := start(t)
	res, body := post(t, addr)
	if res.StatusCode != 429 || body != `{"allowed":false,"limit":5}` {
		t.Errorf("answered %d %q, want the recorded 429 and body", res.StatusCode, body)
	}
	for name, want := range map[string]string{"Ratelimit": `"bench-fw/1s";r=0;t=1`, "Retry-After": "1", "Content-Type": "application/json"} {
		if got := res.Header.Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if got := res.Header.Get("Date"); got == "Mon, 01 Jan 2001 00:00:00 GMT" {
		t.Errorf("Date is the recorded one, want the server's own")
	}
	stop()
}

func TestCountsEachRequestInRedis(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t, rdb)
	addr, stop := start(t, "-redis", rdb.Options().Addr, "-prefix", prefix, "-keys", "3")
	const requests = 7
	for range requests {
		if res, body := post(t, addr); res.StatusCode != 429 {
			t.Fatalf("answered %d %q, want the recorded answer after counting", res.StatusCode, body)
		}
	}
	stop()
	ctx := context.Background()
	var total int64
	for i := range 3 {
		key := prefix + strconv.Itoa(i)
		n, err := rdb.Get(ctx, key).Int64()
		if err != nil {
			t.Fatalf("GET %s: %v", key, err)
		}
		if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 || ttl > time.Minute {
			t.Errorf("PTTL %s = %v, want an expiry within a minute", key, ttl)
		}
		total += n
	}
	if total != requests {
		t.Errorf("counted %d over the keys, want %d", total, requests)
	}
}

// start runs the server with the recorded answer and extra arguments on a
// free port; stop ends it and checks it exits cleanly.
func start(t *testing.T, extra ...string) (addr string, stop func()) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "answer.http")
	if err := os.WriteFile(file, []byte(recorded), 0o600); err != nil {
		t.Fatal(err)
	}
	addr = proctest.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	var stderr proctest.Output
	done := make(chan int, 1)
	go func() { done <- run(ctx, append([]string{"-listen", addr, "-answer", file}, extra...), &stderr) }()
	for range 100 {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return addr, func() {
		t.Helper()
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("exit code %d after a clean stop, want 0 (%s)", code, stderr.String())
			}
		case <-time.After(10 * time.Second):
			t.Fatal("did not stop")
		}
	}
}

// post sends a check to addr and returns the answer and its body.
func post(t *testing.T, addr string) (*http.Response, string) {
	t.Helper()
	res, err := http.Post("http://"+addr+"/v1/check", "application/json", strings.NewReader(`{"ip":"192.0.2.1"}`))
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return res, string(body)
}

func TestRefusesBadArguments(t *testing.T) {
	dir := t.TempDir()
	notHTTP := filepath.Join(dir, "bad.http")
	if err := os.WriteFile(notHTTP, []byte("not a response\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge.http")
	if err := os.WriteFile(huge, []byte(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", maxAnswer+1, strings.Repeat("x", maxAnswer+1))), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no answer", nil, "-answer is required"},
		{"missing file", []string{"-answer", filepath.Join(dir, "none")}, "no such file"},
		{"not a response", []string{"-answer", notHTTP}, "malformed HTTP"},
		{"body too long", []string{"-answer", huge}, "body longer than"},
		{"no keys", []string{"-answer", notHTTP, "-keys", "0"}, "at least 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			if code := run(context.Background(), tc.args, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr.String(), tc.want)
			}
		})
	}
}
