// Package e2e runs the services as real processes, built from cmd/, against
// the local Redis and an embedded Kafka-protocol broker: what an operator
// runs, including kills and restarts.
package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binary returns the path of cmd/<name>, building every service once.
func binary(t *testing.T, name string) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "ratewarden-e2e-")
		if buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", binDir+"/", "../../cmd/limiter", "../../cmd/detector", "../../cmd/archiver", "../../cmd/notifier", "../../cmd/devkafka")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, name)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// proc is one service process with its output captured for failure reports.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *proctest.Output
	addr string // of a limiter: known once await has returned
	// opsAddr is a limiter's OPS_LISTEN_ADDR, when it has one: known once
	// await has returned.
	opsAddr string
	// grpcAddr is a limiter's GRPC_LISTEN_ADDR (Envoy's rate limit API),
	// 127.0.0.1:0 unless the test sets it: known once await has returned.
	grpcAddr string
	done     chan struct{}
}

// start runs cmd/<name> as launch does and waits for /readyz.
func start(t *testing.T, name string, env map[string]string) *proc {
	t.Helper()
	p := launch(t, name, env)
	if err := p.await("/readyz", 15*time.Second); err != nil {
		t.Fatal(err)
	}
	return p
}

// launch runs cmd/<name> with env and returns at once, without waiting for
// it to serve; it is stopped with SIGTERM at the end of the test. A limiter
// listens on a port of its choice, read from its log by await: a port
// chosen here and bound later by the process could be taken meanwhile (the
// limiter warms up first, dialing connections from the same port range).
// The other services get a free port chosen here.
func launch(t *testing.T, name string, env map[string]string) *proc {
	t.Helper()
	return launchUnder(t, name, env)
}

// launchUnder is launch with the process started by wrapper (a command
// and its arguments, such as nice -n 19), which execs cmd/<name>.
func launchUnder(t *testing.T, name string, env map[string]string, wrapper ...string) *proc {
	t.Helper()
	p := &proc{name: name, out: &proctest.Output{}, done: make(chan struct{})}
	listen := "127.0.0.1:0"
	if name != "limiter" {
		p.addr = proctest.FreeAddr(t)
		listen = p.addr
	}
	p.cmd = exec.Command(binary(t, name))
	if len(wrapper) > 0 {
		p.cmd = exec.Command(wrapper[0], append(wrapper[1:], binary(t, name))...)
	}
	p.cmd.Env = append(os.Environ(), "LISTEN_ADDR="+listen, "LOG_LEVEL=info")
	if name == "limiter" {
		p.cmd.Env = append(p.cmd.Env, "GRPC_LISTEN_ADDR=127.0.0.1:0") // env may override it
	}
	for k, v := range env {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.stop(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("--- %s output ---\n%s", name, p.out)
		}
	})
	return p
}

// listeningRE finds the addresses in the limiter's "limiter listening"
// line: the decision listener's, the ops listener's (empty without
// OPS_LISTEN_ADDR) and the gRPC listener's (empty when off).
var listeningRE = regexp.MustCompile(`"msg":"limiter listening","service":"limiter","addr":"([^"]+)","ops_addr":"([^"]*)","grpc_addr":"([^"]*)"`)

// await polls path every 10 ms until it answers 200, once the process has
// an address: on the ops listener when the limiter has one (its decision
// listener may want TLS). It fails when the process exits or timeout
// passes; it may be called from any goroutine, once per process.
func (p *proc) await(path string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if p.addr == "" {
			if m := listeningRE.FindStringSubmatch(p.out.String()); m != nil {
				p.addr, p.opsAddr, p.grpcAddr = m[1], m[2], m[3]
			}
		}
		if p.addr != "" {
			addr := p.addr
			if p.opsAddr != "" {
				addr = p.opsAddr
			}
			resp, err := http.Get("http://" + addr + path)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return nil
				}
			}
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited at start:\n%s", p.name, p.out)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no 200 on %s after %v:\n%s", p.name, path, timeout, p.out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop sends sig and waits for the process to exit (SIGKILL after 10 s).
func (p *proc) stop(sig syscall.Signal) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// metric returns the sum of the samples of a metric on /metrics whose
// labels include each of labels (written as on /metrics: `class="timeout"`).
func (p *proc) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	addr := p.addr
	if p.opsAddr != "" {
		addr = p.opsAddr
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var sum float64
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, name+" ") || strings.HasPrefix(line, name+"{") {
			if slices.ContainsFunc(labels, func(l string) bool { return !strings.Contains(line, l) }) {
				continue
			}
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			sum += v
		}
	}
	return sum
}
