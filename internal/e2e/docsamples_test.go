package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
	"github.com/ratewarden/ratewarden/internal/testkit/pgtest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// docAPIToken stands for the token make run writes to .local/run/api-token.
const docAPIToken = "docs-api-token-0123456789"

// requiredSamples are the samples each page must keep: a marker removed
// by mistake would otherwise take its sample out of the test unnoticed.
var requiredSamples = map[string][]string{
	"README.md":     {"first-check", "first-report", "first-json"},
	"docs/api.md":   {"check", "check-batch", "report", "auth", "ban-add", "ban-list", "ban-delete", "rule-put", "rules-list", "rule-put-unknown-key"},
	"docs/envoy.md": {"json", "json-over-limit"},
	"docs/rules.md": {"rules-check"},
}

// The request/answer samples of README.md and docs/*.md are what the shipped
// files answer. Each page's samples run in page order, as a reader runs
// them on a fresh make run: on a limiter of their own with
// deploy/rules.example.yaml and deploy/gateways/envoy/rls/ (as
// deploy/local/run.sh starts it), API_TOKENS and ADMIN_TOKEN, on the local
// Redis and Postgres and an embedded broker. Each answer must be the
// sample's, but for ids, times and time left (maskedKeys, maskedHeaders);
// a sample that drifts fails with the answer to paste.
func TestDocSamples(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages := []string{"README.md"}
	for _, d := range docs {
		pages = append(pages, "docs/"+filepath.Base(d))
	}
	for _, page := range pages {
		samples, err := readSamples(root, page)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range samples {
			if slices.Contains(names, s.name) {
				t.Fatalf("%s:%d: a second sample named %s", page, s.line, s.name)
			}
			names = append(names, s.name)
		}
		for _, want := range requiredSamples[page] {
			if !slices.Contains(names, want) {
				t.Errorf("%s: no sample %s (<!-- sample: %s -->); its page has %q", page, want, want, names)
			}
		}
		if len(samples) > 0 {
			t.Run(page, func(t *testing.T) { runSamples(t, root, samples) })
		}
	}
}

// runSamples runs the samples of one page in order, on a limiter started
// for the page at its first request.
func runSamples(t *testing.T, root string, samples []docSample) {
	vars := map[string]string{"API_TOKEN": docAPIToken, "ADMIN_TOKEN": adminToken}
	var lim *proc
	for _, s := range samples {
		words, err := shellWords(s.command, vars)
		if err != nil {
			t.Errorf("%s:%d: sample %s: %v", s.page, s.line, s.name, err)
			continue
		}
		var got sampleAnswer
		include := false
		if len(words) > 0 && words[0] == "curl" {
			req, err := parseCurl(words)
			if err != nil {
				t.Errorf("%s:%d: sample %s: %v", s.page, s.line, s.name, err)
				continue
			}
			if lim == nil {
				lim = docLimiter(t, root)
			}
			include = req.include
			got = doCurl(t, lim, req, root)
		} else if len(words) > 0 && words[0] == "bin/limiter" {
			got = runCommand(t, root, words)
		} else {
			t.Errorf("%s:%d: sample %s: %q: only curl and bin/limiter commands are run", s.page, s.line, s.name, words)
			continue
		}
		if diffs := compareAnswer(s.answer, got, include, s.mask); len(diffs) > 0 {
			t.Errorf("%s:%d: sample %s differs from what the shipped files answer:\n  %s\nthe answer:\n%s",
				s.page, s.line, s.name, strings.Join(diffs, "\n  "), got.show(include))
		}
	}
}

// docLimiter starts a limiter as deploy/local/run.sh does, on the shipped
// rules, with a Redis prefix, a database and a broker of its own.
func docLimiter(t *testing.T, root string) *proc {
	t.Helper()
	broker := kafkatest.StartBroker(t, decisionsTopic, bansTopic, outcomesTopic)
	return start(t, "limiter", map[string]string{
		"KAFKA_BROKERS":    broker.Addr(),
		"REDIS_URL":        redistest.RequiredURL(t),
		"REDIS_KEY_PREFIX": redistest.Prefix(t, redistest.Client(t)),
		"DATABASE_URL":     pgtest.Database(t),
		"RULES_FILE":       filepath.Join(root, "deploy", "rules.example.yaml"),
		"RLS_CONFIG_DIR":   filepath.Join(root, "deploy", "gateways", "envoy", "rls"),
		"API_TOKENS":       docAPIToken,
		"ADMIN_TOKEN":      adminToken,
		"INSTANCE_ID":      "limiter-1",
		// The answers are make run's; a loaded test machine only makes
		// them slower, which must not turn a decision into a timeout's.
		"REDIS_TIMEOUT": "5s",
	})
}

// doCurl sends req to lim as curl would, and returns its answer with the
// repository's path made relative, as make run shows the files it loads.
func doCurl(t *testing.T, lim *proc, req curlRequest, root string) sampleAnswer {
	t.Helper()
	var body io.Reader
	if req.body != "" {
		body = strings.NewReader(req.body)
	}
	r, err := http.NewRequest(req.method, "http://"+lim.addr+req.path, body)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range req.header {
		r.Header.Add(h[0], h[1])
	}
	client := &http.Client{Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.ReplaceAll(b, []byte(root+"/"), nil)
	return sampleAnswer{status: resp.Proto + " " + resp.Status, code: resp.StatusCode, header: resp.Header, body: b}
}

// runCommand runs a sample's command (bin/limiter ...) from the
// repository's root, with the binary the tests built.
func runCommand(t *testing.T, root string, words []string) sampleAnswer {
	t.Helper()
	cmd := exec.Command(binary(t, "limiter"), words[1:]...)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(&out, "(%v)\n", err)
	}
	return sampleAnswer{body: out.Bytes()}
}

// show writes the answer as the sample would show it.
func (a sampleAnswer) show(include bool) string {
	if !include {
		return string(a.body)
	}
	var b strings.Builder
	b.WriteString(a.status + "\n")
	var names []string
	for name := range a.header {
		if !slices.Contains(ignoredHeaders, name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		for _, v := range a.header[name] {
			b.WriteString(name + ": " + v + "\n")
		}
	}
	b.WriteString("\n")
	b.Write(a.body)
	return b.String()
}
