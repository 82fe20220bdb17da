package client

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"
)

// An answer to a batch is the decisions of its checks, each once: an
// answer that gives "decisions" twice (two answers run together, a
// hostile proxy) is no answer, even when the two arrays together count as
// many entries as checks (the second array would overwrite the first's
// decisions from index 0, and leave the last checks a zero Decision, a
// refusal without a reason); and an entry of status 200 without a reason
// is no decision, as parseDecision says of a single check's answer.
// Before, both were taken: innocent checks refused with no reason.
func TestBatchAnswerNotTheChecks(t *testing.T) {
	ok := `{"status":200,"allowed":true,"reason":"ok","remaining":1}`
	for name, body := range map[string]string{
		"decisions twice":       `{"decisions":[` + ok + `,` + ok + `],"decisions":[` + ok + `]}`,
		"decisions twice, more": `{"decisions":[` + ok + `],"decisions":[` + ok + `,` + ok + `]}`,
		"a 200 without reason":  `{"decisions":[` + ok + `,{"status":200},` + ok + `]}`,
		"an empty entry":        `{"decisions":[` + ok + `,{"status":200,"allowed":false},` + ok + `]}`,
	} {
		ds := make([]Decision, 3)
		errs := make([]batchError, 3)
		if err := parseBatch([]byte(body), ds, errs); err == nil {
			t.Errorf("%s: taken as %+v", name, ds)
		}
	}
	var rs []ReportResult
	if err := parseReports([]byte(`{"reports":[{"mode":"redis"}],"reports":[{"mode":"redis"}]}`), 2, &rs); err == nil {
		t.Errorf("reports twice: taken as %+v", rs)
	}
	// Through Check: the gathered checks get the failure policy's decision,
	// not a refusal without a reason.
	var held sync.Once
	release := make(chan struct{})
	l := newFake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/check" {
			held.Do(func() { <-release })
			_, _ = w.Write([]byte(`{"allowed":true,"reason":"ok"}`))
			return
		}
		_, _ = w.Write([]byte(`{"decisions":[` + ok + `,` + ok + `],"decisions":[` + ok + `]}`))
	})
	c := newClient(t, Config{URL: l.URL, BatchWait: time.Hour, Timeout: time.Minute, BreakerFailures: 100})
	first := make(chan error, 1)
	go func() {
		_, err := c.Check(context.Background(), &Request{IP: "203.0.113.1", Endpoint: "/a"})
		first <- err
	}()
	for len(l.sent("/v1/check")) == 0 {
		time.Sleep(time.Millisecond)
	}
	outs := gather(t, c, context.Background(), []string{"/b", "/c", "/d"})
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for i, out := range outs {
		if r := <-out; r.d.Reason == "" || !r.d.Fallback || r.err == nil {
			t.Errorf("check %d: %+v, %v; want the failure policy's, an error", i, r.d, r.err)
		}
	}
}
