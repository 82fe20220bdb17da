// Static checks of docker-compose.yml and the compose nginx gateway (the
// Envoy one: manifests_gateways_test.go).

package deploy_test

import (
	"bytes"
	"fmt"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/internal/ipprefix"
)

// manifestComposeService is one service of the compose file, with what the
// checks need resolved.
type manifestComposeService struct {
	name    string
	raw     map[string]any
	binary  string // limiter, detector, archiver, loadgen; "" for other images
	env     map[string]string
	oneShot bool
}

func manifestComposeServices(compose map[string]any) map[string]*manifestComposeService {
	out := map[string]*manifestComposeService{}
	for name, v := range manifestMap(compose["services"]) {
		raw := manifestMap(v)
		s := &manifestComposeService{name: name, raw: raw, env: map[string]string{}}
		s.oneShot = manifestStr(raw["restart"]) == "no"
		switch env := raw["environment"].(type) {
		case map[string]any:
			for k, v := range env {
				s.env[k] = manifestStr(v)
			}
		case []any:
			for _, e := range env {
				k, v, _ := strings.Cut(manifestStr(e), "=")
				s.env[k] = v
			}
		}
		if raw["build"] != nil || strings.Contains(manifestStr(raw["image"]), "ratewarden") {
			s.binary = manifestDefaultBin
			if ep := manifestStrings(raw["entrypoint"]); len(ep) > 0 {
				s.binary = path.Base(ep[0])
			}
		}
		out[name] = s
	}
	return out
}

// manifestComposeMounts returns the service's volumes as source -> target;
// named volumes are left out.
func manifestComposeMounts(raw map[string]any) map[string]string {
	out := map[string]string{}
	for _, v := range manifestList(raw["volumes"]) {
		var src, dst string
		if m := manifestMap(v); m != nil {
			src, dst = manifestStr(m["source"]), manifestStr(m["target"])
		} else {
			parts := strings.Split(manifestStr(v), ":")
			if len(parts) < 2 {
				continue
			}
			src, dst = parts[0], parts[1]
		}
		if strings.HasPrefix(src, ".") || strings.HasPrefix(src, "/") {
			out[src] = dst
		}
	}
	return out
}

// manifestListenAddr is the service's LISTEN_ADDR, or its default.
func manifestListenAddr(cfg manifestConfig, binary string, env map[string]string) string {
	if a := env["LISTEN_ADDR"]; a != "" {
		return a
	}
	return cfg.listen[binary]
}

// manifestComposeProblems checks the compose file: root is the directory
// its relative paths start from.
func manifestComposeProblems(compose map[string]any, cfg manifestConfig, root string) []string {
	var problems []string
	report := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	services := manifestComposeServices(compose)
	if len(services) == 0 {
		return []string{"no services"}
	}
	names := make([]string, 0, len(services))
	for n := range services {
		names = append(names, n)
	}
	slices.Sort(names)

	instances := map[string]string{}
	var limiters []*manifestComposeService
	for _, name := range names {
		s := services[name]
		if manifestStr(s.raw["restart"]) == "" {
			report("%s: no restart policy", name)
		}
		for src := range manifestComposeMounts(s.raw) {
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(src))); err != nil {
				report("%s: mounts %s, which does not exist", name, src)
			}
		}
		manifestComposeDependsProblems(services, s, report)

		if s.binary == "" {
			if s.raw["healthcheck"] == nil && !s.oneShot &&
				!slices.ContainsFunc(manifestShelllessImages, func(img string) bool { return strings.HasPrefix(manifestStr(s.raw["image"]), img) }) {
				report("%s: no healthcheck", name)
			}
			continue
		}
		if _, ok := cfg.env[s.binary]; !ok {
			report("%s: entrypoint %s is none of the image's binaries", name, s.binary)
			continue
		}
		envNames := make([]string, 0, len(s.env))
		for k := range s.env {
			envNames = append(envNames, k)
		}
		if unknown := manifestUnknownEnv(cfg, s.binary, envNames); len(unknown) > 0 {
			report("%s: environment variables the %s does not read: %s", name, s.binary, strings.Join(unknown, ", "))
		}
		if s.binary == "loadgen" {
			if !slices.Contains(manifestStrings(s.raw["command"]), "-token") {
				report("%s: no -token: the limiters refuse calls without one of their API_TOKENS", name)
			}
			continue
		}
		if s.raw["command"] != nil {
			report("%s: the %s takes no arguments (override entrypoint, not command)", name, s.binary)
		}
		if s.env["LISTEN_ADDR"] == "" {
			report("%s: set LISTEN_ADDR explicitly (the %s's default is %s)", name, s.binary, cfg.listen[s.binary])
		}
		if s.binary == "limiter" || s.binary == "detector" {
			problems = append(problems, manifestComposeRulesProblems(s, root)...)
		}
		if s.binary == "limiter" {
			limiters = append(limiters, s)
			id := s.env["INSTANCE_ID"]
			if id == "" {
				report("%s: no INSTANCE_ID (limiters must be told apart in events and heartbeats)", name)
			} else if other, dup := instances[id]; dup {
				report("%s: INSTANCE_ID %s is also %s's", name, id, other)
			}
			instances[id] = name
		}
	}
	if len(limiters) < 2 {
		report("%d limiter services; the deployment shows several sharing Redis", len(limiters))
	}
	problems = append(problems, manifestComposeGatewayProblems(services, limiters, cfg, root)...)
	problems = append(problems, manifestComposeEnvoyProblems(services, limiters, root)...)
	return problems
}

func manifestComposeDependsProblems(services map[string]*manifestComposeService, s *manifestComposeService, report func(string, ...any)) {
	deps := map[string]string{}
	switch d := s.raw["depends_on"].(type) {
	case map[string]any:
		for k, v := range d {
			deps[k] = manifestStr(manifestAt(v, "condition"))
		}
	case []any:
		for _, k := range d {
			deps[manifestStr(k)] = "service_started"
		}
	}
	for dep, cond := range deps {
		target, ok := services[dep]
		switch {
		case !ok:
			report("%s: depends on %s, which is not a service", s.name, dep)
		case cond == "service_healthy" && target.raw["healthcheck"] == nil:
			report("%s: waits for %s to be healthy, but %s has no healthcheck", s.name, dep, dep)
		case cond == "service_completed_successfully" && !target.oneShot:
			report("%s: waits for %s to complete, but %s restarts", s.name, dep, dep)
		}
	}
}

// manifestComposeRulesProblems checks that RULES_FILE names a mounted file
// the limiter accepts.
func manifestComposeRulesProblems(s *manifestComposeService, root string) []string {
	file := s.env["RULES_FILE"]
	if !path.IsAbs(file) {
		return []string{fmt.Sprintf("%s: RULES_FILE %q must be an absolute path in the container", s.name, file)}
	}
	for src, dst := range manifestComposeMounts(s.raw) {
		host := filepath.Join(root, filepath.FromSlash(src))
		switch dst {
		case file:
		case path.Dir(file):
			host = filepath.Join(host, path.Base(file))
		default:
			continue
		}
		data, err := os.ReadFile(host)
		if err != nil {
			return []string{fmt.Sprintf("%s: RULES_FILE %s is mounted from %s: %v", s.name, file, src, err)}
		}
		return manifestCheckRulesFile(s.name+": "+src, data)
	}
	return []string{fmt.Sprintf("%s: nothing is mounted at RULES_FILE %s", s.name, file)}
}

var (
	manifestNginxUpstream  = regexp.MustCompile(`(?s)upstream\s+(\S+)\s*\{(.*?)\}`)
	manifestNginxServer    = regexp.MustCompile(`(?m)^\s*server\s+([^\s;:]+):(\d+)`)
	manifestNginxAuthProxy = regexp.MustCompile(`proxy_pass\s+http://([^/\s;]+)/v1/auth\s*;`)
	manifestNginxBearer    = regexp.MustCompile(`proxy_set_header\s+Authorization\s+"Bearer \$\{(\w+)\}"`)
)

// manifestComposeGatewayProblems checks the nginx gateway against the
// limiters: its auth upstream lists every limiter on its listen port, the
// limiters answer a status auth_request accepts, and they trust nginx's
// address for X-Forwarded-For.
func manifestComposeGatewayProblems(services map[string]*manifestComposeService, limiters []*manifestComposeService, cfg manifestConfig, root string) []string {
	var problems []string
	report := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	var gw *manifestComposeService
	for _, s := range services {
		if strings.HasPrefix(manifestStr(s.raw["image"]), "nginx") {
			gw = s
		}
	}
	if gw == nil {
		return []string{"no nginx gateway service"}
	}
	// The configuration, mounted as it is or as a template of the image's
	// entrypoint (for the token).
	var conf []byte
	for src, dst := range manifestComposeMounts(gw.raw) {
		if strings.HasSuffix(dst, ".conf") || strings.HasSuffix(dst, ".conf.template") {
			var err error
			if conf, err = os.ReadFile(filepath.Join(root, filepath.FromSlash(src))); err != nil {
				return []string{fmt.Sprintf("%s: %v", gw.name, err)}
			}
		}
	}
	if !bytes.Contains(conf, []byte("auth_request ")) {
		return []string{gw.name + ": its configuration has no auth_request"}
	}
	m := manifestNginxAuthProxy.FindSubmatch(conf)
	if m == nil {
		return []string{gw.name + ": no location proxies to <upstream>/v1/auth"}
	}
	var servers []string
	for _, u := range manifestNginxUpstream.FindAllSubmatch(conf, -1) {
		if string(u[1]) == string(m[1]) {
			for _, s := range manifestNginxServer.FindAllSubmatch(u[2], -1) {
				servers = append(servers, string(s[1])+":"+string(s[2]))
			}
		}
	}
	var want []string
	for _, l := range limiters {
		want = append(want, l.name+":"+manifestPort(manifestListenAddr(cfg, "limiter", l.env)))
	}
	slices.Sort(servers)
	slices.Sort(want)
	if !slices.Equal(servers, want) {
		report("%s: upstream %s is %v, the limiters are %v", gw.name, m[1], servers, want)
	}

	// The gateway sends one of the limiters' API_TOKENS, from its own
	// environment (the template's variable), and every limiter wants one.
	if m := manifestNginxBearer.FindSubmatch(conf); m == nil {
		report("%s: the auth location sends no Authorization: Bearer ${VAR} header", gw.name)
	} else if gw.env[string(m[1])] == "" || !strings.HasPrefix(string(m[1]), gw.env["NGINX_ENVSUBST_FILTER"]) {
		report("%s: its configuration sends ${%s}, which its environment does not set or NGINX_ENVSUBST_FILTER (%q) does not substitute",
			gw.name, m[1], gw.env["NGINX_ENVSUBST_FILTER"])
	}
	for _, l := range limiters {
		if l.env["API_TOKENS"] == "" {
			report("%s: no API_TOKENS: anyone reaching it could spend clients' budgets or get them banned", l.name)
		}
	}

	var gwAddrs []string
	for _, n := range manifestMap(gw.raw["networks"]) {
		if a := manifestStr(manifestAt(n, "ipv4_address")); a != "" {
			gwAddrs = append(gwAddrs, a)
		}
	}
	if len(gwAddrs) == 0 {
		report("%s: no fixed ipv4_address, so the limiters cannot name it in TRUSTED_PROXIES", gw.name)
	}
	for _, l := range limiters {
		if st := l.env["AUTH_DENY_STATUS"]; st != "401" && st != "403" {
			report("%s: AUTH_DENY_STATUS %q: nginx auth_request accepts only 2xx, 401 and 403", l.name, st)
		}
		for _, a := range gwAddrs {
			if !manifestTrusts(l.env["TRUSTED_PROXIES"], a) {
				report("%s: TRUSTED_PROXIES %q does not contain the gateway's address %s", l.name, l.env["TRUSTED_PROXIES"], a)
			}
		}
	}
	return problems
}

func manifestTrusts(proxies, addr string) bool {
	for _, p := range strings.Split(proxies, ",") {
		prefix, err := ipprefix.Parse(strings.TrimSpace(p))
		if err != nil {
			continue
		}
		a, err := ipprefix.Parse(addr)
		if err == nil && prefix.Contains(a.Addr()) {
			return true
		}
	}
	return false
}

func manifestLoadCompose(t testing.TB) map[string]any {
	t.Helper()
	docs := manifestReadDocs(t, filepath.Join(manifestRoot, manifestComposeFile))
	if len(docs) != 1 {
		t.Fatalf("%s: %d YAML documents, want 1", manifestComposeFile, len(docs))
	}
	return docs[0]
}

func TestManifestCompose(t *testing.T) {
	cfg := manifestLoadConfig(t)
	compose := manifestLoadCompose(t)
	for _, p := range manifestComposeProblems(compose, cfg, manifestRoot) {
		t.Error(p)
	}
}

// manifestComposeVarRef matches a value that is an interpolated variable,
// such as ${ACCESS_LOG_TOPIC:-}.
var manifestComposeVarRef = regexp.MustCompile(`^\$\{([A-Z_]+)(:?-[^}]*)?\}$`)

// kafka-init creates every topic a ratewarden service reads or writes: a
// topic named in the file (--topic name), and one set from the
// environment, such as the detector's ACCESS_LOG_TOPIC, when it is set. A
// consumer of a missing topic waits, and a producer such as the access-log
// shipper (kcat -P) stalls, so a topic nothing creates is a stack that
// silently does nothing.
func TestManifestComposeCreatesTopics(t *testing.T) {
	services := manifestComposeServices(manifestLoadCompose(t))
	init := services["kafka-init"]
	if init == nil || !init.oneShot {
		t.Fatal("no one-shot kafka-init service")
	}
	script := strings.Join(manifestStrings(init.raw["command"]), "\n")
	if d := services["detector"]; d == nil || !manifestComposeVarRef.MatchString(d.env["ACCESS_LOG_TOPIC"]) {
		t.Error("detector: ACCESS_LOG_TOPIC is not taken from the environment (an .env file turns the access-log outcomes on)")
	}
	for _, name := range slices.Sorted(maps.Keys(services)) {
		s := services[name]
		if s.binary == "" {
			continue
		}
		for _, k := range slices.Sorted(maps.Keys(s.env)) {
			v := s.env[k]
			if !strings.HasSuffix(k, "_TOPIC") || v == "" {
				continue
			}
			m := manifestComposeVarRef.FindStringSubmatch(v)
			switch {
			case m == nil && !strings.Contains(script, "--topic "+v+" "):
				t.Errorf("%s: %s=%s, which kafka-init does not create", name, k, v)
			case m != nil && init.env[m[1]] != v:
				t.Errorf("%s: %s=%s, but kafka-init's %s is %q", name, k, v, m[1], init.env[m[1]])
			case m != nil && !strings.Contains(script, `--topic "$$`+m[1]+`"`):
				t.Errorf("%s: %s=%s, which kafka-init does not create when set", name, k, v)
			}
		}
	}
}

// The Prometheus configuration (deploy/prometheus/prometheus.yml) scrapes
// each ratewarden service of the compose file on the port it listens on.
func TestManifestComposeScrapeTargets(t *testing.T) {
	cfg := manifestLoadConfig(t)
	services := manifestComposeServices(manifestLoadCompose(t))
	file := filepath.Join(manifestRoot, "deploy", "prometheus", "prometheus.yml")
	docs := manifestReadDocs(t, file)
	scraped := map[string]bool{}
	for _, job := range manifestList(manifestAt(docs[0], "scrape_configs")) {
		for _, sc := range manifestList(manifestAt(job, "static_configs")) {
			for _, target := range manifestStrings(manifestAt(sc, "targets")) {
				host, port, err := net.SplitHostPort(target)
				if err != nil {
					t.Errorf("target %q: %v", target, err)
					continue
				}
				s, ok := services[host]
				if !ok || s.binary == "" {
					continue
				}
				if want := manifestPort(manifestListenAddr(cfg, s.binary, s.env)); port != want {
					t.Errorf("prometheus scrapes %s, but %s listens on port %s", target, host, want)
				}
				scraped[host] = true
			}
		}
	}
	for name, s := range services {
		if s.binary != "" && s.binary != "loadgen" && !scraped[name] {
			t.Errorf("prometheus does not scrape %s", name)
		}
	}
}

// --- Kubernetes ---
