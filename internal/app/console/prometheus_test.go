package console

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
)

// startPrometheus runs Debian's prometheus scraping the limiter and the
// detector every second, waits until it has scraped both, and returns its
// base URL. Without the binary the test is skipped, or fails when CI is
// set.
func startPrometheus(t *testing.T, limiter, detector string) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		testkit.Unavailable(t, "prometheus not found (Debian/Ubuntu: apt-get install prometheus): %v", err)
	}
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: limiter
    static_configs: [{targets: [%q]}]
  - job_name: detector
    static_configs: [{targets: [%q]}]
`, limiter, detector)
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := proctest.FreeAddr(t)
	done, out := proctest.Run(t, exec.Command(bin, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr))
	base := "http://" + addr
	testkit.WaitFor(t, time.Minute, "Prometheus to scrape the limiter and the detector", func() bool {
		select {
		case <-done:
			t.Fatalf("prometheus exited:\n%s", out.String())
		default:
		}
		up, err := promQuery(base, `sum(up{job=~"limiter|detector"})`)
		return err == nil && up[""] == 2
	})
	return base
}

// promQuery runs an instant query and returns its values by the labels'
// values joined ("" for a series without labels).
func promQuery(base, query string) (map[string]float64, error) {
	resp, err := http.Get(base + "/api/v1/query?" + url.Values{"query": {query}}.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var a struct {
		Data struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		return nil, err
	}
	values := map[string]float64{}
	for _, r := range a.Data.Result {
		var key []string
		for _, v := range r.Metric {
			key = append(key, v)
		}
		text, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return nil, err
		}
		values[strings.Join(key, ",")] = v
	}
	return values, nil
}

var (
	ruleCounts = regexp.MustCompile(`<code>api-per-ip</code></td><td>file</td><td class="hits">(\d+)</td><td class="denied">(\d+)</td>`)
	lagFigure  = regexp.MustCompile(`<span class="big">(\d+)</span> messages of detector lag on (\w+)`)
)

// With CONSOLE_PROMETHEUS_URL, a real Prometheus scraping a real limiter
// and detector: the rules page shows the rule's hits (requests of every
// result) and denials (rate_limited) over the last day as Prometheus counts
// them, and the overview the detector's lag by source.
func TestPrometheusFigures(t *testing.T) {
	s := startStackWithPrometheus(t)
	s.banByDetector(t, "203.0.113.70")
	b := newBrowser(t, s.console)
	overview := b.login("vic", "vic-password")
	if m := lagFigure.FindAllStringSubmatch(overview.body, -1); len(m) == 0 || !strings.Contains(overview.body, "on decisions") {
		t.Errorf("the overview shows no detector lag on decisions:\n%s", overview.body)
	}

	var hits, denied int64
	testkit.WaitFor(t, time.Minute, "the rules page's counts to be Prometheus's", func() bool {
		page := b.get("/rules").body
		m := ruleCounts.FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("the rules page shows no hits and denials of api-per-ip:\n%s", page)
		}
		hits, _ = strconv.ParseInt(m[1], 10, 64)
		denied, _ = strconv.ParseInt(m[2], 10, 64)
		all, err1 := promQuery(s.prometheus, `sum(increase(rate_limit_requests_total{rule="api-per-ip"}[24h]))`)
		refused, err2 := promQuery(s.prometheus, `sum(increase(rate_limit_requests_total{rule="api-per-ip",result="rate_limited",shadow="false"}[24h]))`)
		return err1 == nil && err2 == nil && denied > 0 && hits > denied &&
			int64(math.Round(all[""])) == hits && int64(math.Round(refused[""])) == denied
	})
	t.Logf("api-per-ip: %d hits, %d denied", hits, denied)
}
