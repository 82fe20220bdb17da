package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/ratewarden/ratewarden/internal/rules"
)

// The reference deployment (Dockerfile, docker-compose.yml,
// deploy/compose/nginx.conf, deploy/kubernetes) cannot be run here: these
// tests hold it to the invariants that would otherwise only fail at
// `docker compose up` or `kubectl apply` time.

const (
	manifestRoot         = ".."
	manifestComposeFile  = "docker-compose.yml"
	manifestKubeDir      = "deploy/kubernetes"
	manifestImage        = "ghcr.io/ratewarden/ratewarden"
	manifestBinDir       = "/usr/local/bin/"
	manifestDefaultBin   = "limiter" // the image's ENTRYPOINT
	manifestKustomizeRel = "kustomization.yaml"
)

// manifestRuntimeEnv are read by the Go runtime, not by internal/config.
var manifestRuntimeEnv = []string{"GOMAXPROCS", "GOMEMLIMIT", "GOGC", "GODEBUG"}

// manifestShelllessImages have no shell or HTTP client for a healthcheck.
var manifestShelllessImages = []string{"traefik/whoami", "hashicorp/http-echo"}

// manifestConfig is what internal/config says each service reads.
type manifestConfig struct {
	env    map[string]map[string]bool // service -> variable names
	listen map[string]string          // service -> default LISTEN_ADDR
}

var (
	manifestNameInCall = regexp.MustCompile(`\b\w+\(\s*"([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*)"`)
	manifestListenCall = regexp.MustCompile(`\be\.listen\(\s*"([^"]*)"`)
)

// manifestLoadConfig scans internal/config/*.go for the variable names in
// calls such as e.str("NAME", ...), e.integer("NAME", ...): limiter.go,
// detector.go and archiver.go belong to their service, the other files
// (common.go, env.go) to every service. loadgen reads flags only.
func manifestLoadConfig(t testing.TB) manifestConfig {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(manifestRoot, "internal", "config", "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no internal/config sources: %v", err)
	}
	services := []string{"limiter", "detector", "archiver"}
	cfg := manifestConfig{env: map[string]map[string]bool{"loadgen": {}}, listen: map[string]string{}}
	for _, s := range services {
		cfg.env[s] = map[string]bool{}
		for _, n := range manifestRuntimeEnv {
			cfg.env[s][n] = true
		}
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		owners := services
		if s := strings.TrimSuffix(filepath.Base(f), ".go"); slices.Contains(services, s) {
			owners = []string{s}
			if m := manifestListenCall.FindSubmatch(src); m != nil {
				cfg.listen[s] = string(m[1])
			}
		}
		for _, m := range manifestNameInCall.FindAllSubmatch(src, -1) {
			for _, s := range owners {
				cfg.env[s][string(m[1])] = true
			}
		}
	}
	// The scan must see what README documents, or it proves nothing.
	for s, names := range map[string][]string{
		"limiter":  {"REDIS_URL", "KAFKA_BROKERS", "LISTEN_ADDR", "RULES_FILE", "ADMIN_TOKEN", "TRUSTED_PROXIES", "AUTH_DENY_STATUS", "DATABASE_URL", "INSTANCE_ID"},
		"detector": {"REDIS_URL", "RULES_FILE", "LISTEN_ADDR", "DETECTOR_GROUP_ID"},
		"archiver": {"DATABASE_URL", "LISTEN_ADDR", "ARCHIVER_GROUP_ID"},
	} {
		for _, n := range names {
			if !cfg.env[s][n] {
				t.Fatalf("scan of internal/config found no %s for the %s: the regexp is out of date", n, s)
			}
		}
		if cfg.listen[s] == "" {
			t.Fatalf("scan of internal/config found no default LISTEN_ADDR for the %s", s)
		}
	}
	if cfg.env["detector"]["ADMIN_TOKEN"] {
		t.Fatal("ADMIN_TOKEN attributed to the detector: the per-file attribution is broken")
	}
	return cfg
}

// manifestUnknownEnv returns the names service does not read, sorted.
func manifestUnknownEnv(cfg manifestConfig, service string, names []string) []string {
	var unknown []string
	for _, n := range names {
		if !cfg.env[service][n] {
			unknown = append(unknown, n)
		}
	}
	slices.Sort(unknown)
	return slices.Compact(unknown)
}

// --- generic YAML access ---

func manifestMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func manifestList(v any) []any {
	l, _ := v.([]any)
	return l
}

func manifestStr(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	default:
		return fmt.Sprint(v)
	}
}

func manifestAt(v any, keys ...string) any {
	for _, k := range keys {
		v = manifestMap(v)[k]
	}
	return v
}

// manifestStrings reads a string or a list of strings.
func manifestStrings(v any) []string {
	if s, ok := v.(string); ok {
		return []string{s}
	}
	var out []string
	for _, e := range manifestList(v) {
		out = append(out, manifestStr(e))
	}
	return out
}

func manifestReadDocs(t testing.TB, file string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := manifestDecodeDocs(data)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return docs
}

func manifestDecodeDocs(data []byte) ([]map[string]any, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []map[string]any
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
}

func manifestPort(addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	return port
}

// manifestCheckRulesFile reports a rules file the limiter would refuse.
func manifestCheckRulesFile(where string, data []byte) []string {
	if _, err := rules.Parse(data); err != nil {
		return []string{fmt.Sprintf("%s: the limiter would refuse these rules: %v", where, err)}
	}
	return nil
}

// --- docker compose ---

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
	var conf []byte
	for src, dst := range manifestComposeMounts(gw.raw) {
		if strings.HasSuffix(dst, ".conf") {
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
		prefix, err := rules.ParsePrefix(strings.TrimSpace(p))
		if err != nil {
			continue
		}
		a, err := rules.ParsePrefix(addr)
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

type manifestKubeObject struct {
	file string
	doc  map[string]any
}

func (o manifestKubeObject) kind() string { return manifestStr(o.doc["kind"]) }
func (o manifestKubeObject) name() string { return manifestStr(manifestAt(o.doc, "metadata", "name")) }
func (o manifestKubeObject) String() string {
	return o.file + ": " + o.kind() + "/" + o.name()
}

func manifestLoadKube(t testing.TB) []manifestKubeObject {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(manifestRoot, manifestKubeDir, "*.y*ml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", manifestKubeDir, err)
	}
	var objs []manifestKubeObject
	for _, f := range files {
		if filepath.Base(f) == manifestKustomizeRel {
			continue
		}
		for _, d := range manifestReadDocs(t, f) {
			objs = append(objs, manifestKubeObject{file: filepath.Base(f), doc: d})
		}
	}
	return objs
}

func manifestFind(objs []manifestKubeObject, kind, name string) (manifestKubeObject, bool) {
	for _, o := range objs {
		if o.kind() == kind && o.name() == name {
			return o, true
		}
	}
	return manifestKubeObject{}, false
}

// manifestKeys returns the keys of a ConfigMap's or Secret's data.
func manifestKeys(o manifestKubeObject) map[string]string {
	out := map[string]string{}
	for _, field := range []string{"data", "stringData", "binaryData"} {
		for k, v := range manifestMap(o.doc[field]) {
			out[k] = manifestStr(v)
		}
	}
	return out
}

// manifestSelects reports whether selector (matchLabels or a Service's
// plain map) selects labels.
func manifestSelects(selector, labels map[string]any) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if manifestStr(labels[k]) != manifestStr(v) {
			return false
		}
	}
	return true
}

// manifestKubeProblems checks every Deployment, Service, PDB and HPA.
func manifestKubeProblems(objs []manifestKubeObject, cfg manifestConfig) []string {
	var problems []string
	report := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	deployments := map[string]manifestKubeObject{}
	for _, o := range objs {
		if o.kind() == "Deployment" {
			deployments[o.name()] = o
			problems = append(problems, manifestDeploymentProblems(objs, o, cfg)...)
		}
	}
	if _, ok := deployments["limiter"]; !ok {
		report("no limiter Deployment")
	}
	for _, o := range objs {
		switch o.kind() {
		case "Service":
			sel := manifestMap(manifestAt(o.doc, "spec", "selector"))
			var target *manifestKubeObject
			for _, d := range deployments {
				if manifestSelects(sel, manifestMap(manifestAt(d.doc, "spec", "template", "metadata", "labels"))) {
					target = &d
				}
			}
			if target == nil {
				report("%s: selects no Deployment's pods", o)
				continue
			}
			ports := map[string]bool{}
			for _, c := range manifestList(manifestAt(target.doc, "spec", "template", "spec", "containers")) {
				for _, p := range manifestList(manifestAt(c, "ports")) {
					ports[manifestStr(manifestAt(p, "name"))] = true
					ports[manifestStr(manifestAt(p, "containerPort"))] = true
				}
			}
			for _, p := range manifestList(manifestAt(o.doc, "spec", "ports")) {
				if tp := manifestStr(manifestAt(p, "targetPort")); tp != "" && !ports[tp] {
					report("%s: targetPort %s is no port of %s", o, tp, target.name())
				}
			}
		}
	}
	return append(problems, manifestLimiterScalingProblems(objs, deployments["limiter"])...)
}

// manifestLimiterScalingProblems checks that the PDB and the HPA cover the
// limiter and let a drain progress (minAvailable below the fewest replicas).
func manifestLimiterScalingProblems(objs []manifestKubeObject, limiter manifestKubeObject) []string {
	if limiter.doc == nil {
		return nil
	}
	labels := manifestMap(manifestAt(limiter.doc, "spec", "template", "metadata", "labels"))
	var pdb, hpa *manifestKubeObject
	for _, o := range objs {
		switch {
		case o.kind() == "PodDisruptionBudget" && manifestSelects(manifestMap(manifestAt(o.doc, "spec", "selector", "matchLabels")), labels):
			pdb = &o
		case o.kind() == "HorizontalPodAutoscaler" && manifestStr(manifestAt(o.doc, "spec", "scaleTargetRef", "name")) == limiter.name():
			hpa = &o
		}
	}
	if pdb == nil || hpa == nil {
		return []string{"the limiter needs both a PodDisruptionBudget and a HorizontalPodAutoscaler"}
	}
	minAvailable, _ := strconv.Atoi(manifestStr(manifestAt(pdb.doc, "spec", "minAvailable")))
	minReplicas, _ := strconv.Atoi(manifestStr(manifestAt(hpa.doc, "spec", "minReplicas")))
	replicas, _ := strconv.Atoi(manifestStr(manifestAt(limiter.doc, "spec", "replicas")))
	if minAvailable < 1 || minAvailable >= minReplicas || minAvailable >= replicas {
		return []string{fmt.Sprintf("limiter: PDB minAvailable %d must be at least 1 and below the HPA's minReplicas %d and the replicas %d",
			minAvailable, minReplicas, replicas)}
	}
	return nil
}

func manifestDeploymentProblems(objs []manifestKubeObject, d manifestKubeObject, cfg manifestConfig) []string {
	var problems []string
	report := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	pod := manifestMap(manifestAt(d.doc, "spec", "template", "spec"))
	podNonRoot := manifestAt(pod, "securityContext", "runAsNonRoot") == true
	if !manifestSelects(manifestMap(manifestAt(d.doc, "spec", "selector", "matchLabels")),
		manifestMap(manifestAt(d.doc, "spec", "template", "metadata", "labels"))) {
		report("%s: its selector does not select its own pods", d)
	}
	containers := manifestList(pod["containers"])
	if len(containers) == 0 {
		report("%s: no containers", d)
	}
	for _, c := range containers {
		where := fmt.Sprintf("%s container %s", d, manifestStr(manifestAt(c, "name")))
		ports := map[string]string{} // name and number -> number
		for _, p := range manifestList(manifestAt(c, "ports")) {
			n := manifestStr(manifestAt(p, "containerPort"))
			ports[n] = n
			if name := manifestStr(manifestAt(p, "name")); name != "" {
				ports[name] = n
			}
		}
		probePort := ""
		for probe, want := range map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/healthz"} {
			get := manifestAt(c, probe, "httpGet")
			if got := manifestStr(manifestAt(get, "path")); got != want {
				report("%s: %s path %q, want %s", where, probe, got, want)
				continue
			}
			p, ok := ports[manifestStr(manifestAt(get, "port"))]
			if !ok {
				report("%s: %s port %v is none of the container's ports", where, probe, manifestAt(get, "port"))
			}
			probePort = p
		}
		for _, r := range []string{"requests", "limits"} {
			for _, res := range []string{"cpu", "memory"} {
				if manifestStr(manifestAt(c, "resources", r, res)) == "" {
					report("%s: no resources.%s.%s", where, r, res)
				}
			}
		}
		sc := manifestAt(c, "securityContext")
		if nonRoot, set := manifestMap(sc)["runAsNonRoot"]; !(nonRoot == true || (!set && podNonRoot)) {
			report("%s: not runAsNonRoot", where)
		}
		if manifestAt(sc, "readOnlyRootFilesystem") != true {
			report("%s: root filesystem not read-only", where)
		}
		if manifestAt(sc, "allowPrivilegeEscalation") != false {
			report("%s: allowPrivilegeEscalation not false", where)
		}
		image := manifestStr(manifestAt(c, "image"))
		if !strings.HasPrefix(image, manifestImage+":") {
			report("%s: image %s, want %s:<tag>", where, image, manifestImage)
			continue
		}
		binary := manifestDefaultBin
		if cmd := manifestStrings(manifestAt(c, "command")); len(cmd) > 0 {
			binary = path.Base(cmd[0])
		}
		if _, ok := cfg.env[binary]; !ok || binary == "loadgen" {
			report("%s: command %s is none of the services", where, binary)
			continue
		}
		if manifestAt(c, "args") != nil {
			report("%s: the %s takes no arguments", where, binary)
		}
		env, envProblems := manifestContainerEnv(objs, c)
		for _, p := range envProblems {
			report("%s: %s", where, p)
		}
		names := make([]string, 0, len(env))
		for n := range env {
			names = append(names, n)
		}
		if unknown := manifestUnknownEnv(cfg, binary, names); len(unknown) > 0 {
			report("%s: environment variables the %s does not read: %s", where, binary, strings.Join(unknown, ", "))
		}
		listen := env["LISTEN_ADDR"]
		if listen == "" {
			report("%s: set LISTEN_ADDR explicitly (the %s's default is %s)", where, binary, cfg.listen[binary])
		} else if probePort != "" && manifestPort(listen) != probePort {
			report("%s: LISTEN_ADDR %s but the probes use port %s", where, listen, probePort)
		}
		if binary == "limiter" || binary == "detector" {
			problems = append(problems, manifestKubeRulesProblems(objs, pod, c, env["RULES_FILE"], where)...)
		}
	}
	if manifestStr(manifestAt(d.doc, "metadata", "name")) == "limiter" && manifestList(pod["topologySpreadConstraints"]) == nil {
		report("%s: no topologySpreadConstraints", d)
	}
	return problems
}

// manifestContainerEnv resolves a container's environment: env entries and
// every key of the ConfigMaps and Secrets of envFrom. Values from
// valueFrom are left empty.
func manifestContainerEnv(objs []manifestKubeObject, c any) (map[string]string, []string) {
	env := map[string]string{}
	var problems []string
	for _, from := range manifestList(manifestAt(c, "envFrom")) {
		for kind, ref := range map[string]string{"ConfigMap": "configMapRef", "Secret": "secretRef"} {
			name := manifestStr(manifestAt(from, ref, "name"))
			if name == "" {
				continue
			}
			o, ok := manifestFind(objs, kind, name)
			if !ok {
				problems = append(problems, fmt.Sprintf("envFrom %s %s does not exist", kind, name))
				continue
			}
			for k, v := range manifestKeys(o) {
				env[k] = v
			}
		}
	}
	for _, e := range manifestList(manifestAt(c, "env")) {
		name := manifestStr(manifestAt(e, "name"))
		env[name] = manifestStr(manifestAt(e, "value"))
		for kind, ref := range map[string]string{"ConfigMap": "configMapKeyRef", "Secret": "secretKeyRef"} {
			sel := manifestAt(e, "valueFrom", ref)
			if sel == nil {
				continue
			}
			o, ok := manifestFind(objs, kind, manifestStr(manifestAt(sel, "name")))
			if _, has := manifestKeys(o)[manifestStr(manifestAt(sel, "key"))]; !ok || !has {
				problems = append(problems, fmt.Sprintf("%s: %s %v has no key %v", name, kind, manifestAt(sel, "name"), manifestAt(sel, "key")))
			}
		}
	}
	return env, problems
}

// manifestKubeRulesProblems checks that RULES_FILE is in a directory
// mounted whole from a ConfigMap (a subPath mount never sees an update)
// holding a rules file the limiter accepts.
func manifestKubeRulesProblems(objs []manifestKubeObject, pod map[string]any, c any, file, where string) []string {
	if !path.IsAbs(file) {
		return []string{fmt.Sprintf("%s: RULES_FILE %q must be an absolute path", where, file)}
	}
	for _, m := range manifestList(manifestAt(c, "volumeMounts")) {
		if manifestStr(manifestAt(m, "mountPath")) != path.Dir(file) {
			continue
		}
		if manifestAt(m, "subPath") != nil {
			return []string{where + ": the rules are mounted with subPath, which never sees a ConfigMap update"}
		}
		for _, v := range manifestList(pod["volumes"]) {
			if manifestStr(manifestAt(v, "name")) != manifestStr(manifestAt(m, "name")) {
				continue
			}
			cmName := manifestStr(manifestAt(v, "configMap", "name"))
			cm, ok := manifestFind(objs, "ConfigMap", cmName)
			if !ok {
				return []string{fmt.Sprintf("%s: the rules volume is not a ConfigMap of this folder (%q)", where, cmName)}
			}
			key := path.Base(file)
			for _, item := range manifestList(manifestAt(v, "configMap", "items")) {
				if manifestStr(manifestAt(item, "path")) == key {
					key = manifestStr(manifestAt(item, "key"))
				}
			}
			data, ok := manifestKeys(cm)[key]
			if !ok {
				return []string{fmt.Sprintf("%s: ConfigMap %s has no key %s for RULES_FILE %s", where, cmName, key, file)}
			}
			return manifestCheckRulesFile(fmt.Sprintf("%s: ConfigMap %s key %s", where, cmName, key), []byte(data))
		}
		return []string{fmt.Sprintf("%s: volume %v is not declared", where, manifestAt(m, "name"))}
	}
	return []string{fmt.Sprintf("%s: nothing is mounted at %s, the directory of RULES_FILE %s", where, path.Dir(file), file)}
}

func TestManifestKubernetes(t *testing.T) {
	cfg := manifestLoadConfig(t)
	objs := manifestLoadKube(t)
	for _, p := range manifestKubeProblems(objs, cfg) {
		t.Error(p)
	}
	for _, kind := range []string{"Namespace", "ConfigMap", "Secret", "Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler"} {
		if !slices.ContainsFunc(objs, func(o manifestKubeObject) bool { return o.kind() == kind }) {
			t.Errorf("no %s in %s", kind, manifestKubeDir)
		}
	}
	for _, name := range []string{"limiter", "detector", "archiver"} {
		if _, ok := manifestFind(objs, "Deployment", name); !ok {
			t.Errorf("no %s Deployment", name)
		}
	}
}

// kustomization.yaml lists every manifest of the folder, and only those.
func TestManifestKustomizationListsEveryFile(t *testing.T) {
	dir := filepath.Join(manifestRoot, manifestKubeDir)
	k := manifestReadDocs(t, filepath.Join(dir, manifestKustomizeRel))[0]
	listed := manifestStrings(k["resources"])
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range entries {
		if n := e.Name(); !e.IsDir() && n != manifestKustomizeRel && (strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
			files = append(files, n)
		}
	}
	slices.Sort(files)
	sortedListed := slices.Sorted(slices.Values(listed))
	if !slices.Equal(files, sortedListed) {
		t.Errorf("kustomization resources %v, files in the folder %v", sortedListed, files)
	}
	if manifestStr(k["namespace"]) == "" {
		t.Error("kustomization sets no namespace")
	}
}

// The checkers must catch what they claim to: an unknown variable name in
// the compose file and in a Deployment, a missing mount, a probe on the
// wrong path.
func TestManifestCheckersCatchMistakes(t *testing.T) {
	cfg := manifestLoadConfig(t)
	if got := manifestUnknownEnv(cfg, "limiter", []string{"REDIS_URL", "REDIS_ULR", "GOMAXPROCS", "ARCHIVER_GROUP_ID"}); !slices.Equal(got, []string{"ARCHIVER_GROUP_ID", "REDIS_ULR"}) {
		t.Errorf("manifestUnknownEnv = %v, want the typo and the archiver's variable", got)
	}

	composeWith := func(t *testing.T, edit func(services map[string]any)) []string {
		t.Helper()
		compose := manifestLoadCompose(t)
		edit(manifestMap(compose["services"]))
		return manifestComposeProblems(compose, cfg, manifestRoot)
	}
	kubeWith := func(t *testing.T, edit func(limiter map[string]any)) []string {
		t.Helper()
		objs := manifestLoadKube(t)
		d, ok := manifestFind(objs, "Deployment", "limiter")
		if !ok {
			t.Fatal("no limiter Deployment")
		}
		edit(manifestMap(manifestList(manifestAt(d.doc, "spec", "template", "spec", "containers"))[0]))
		return manifestKubeProblems(objs, cfg)
	}
	tests := []struct {
		name  string
		check func(t *testing.T) []string
		want  string
	}{
		{"compose: misspelled variable", func(t *testing.T) []string {
			return composeWith(t, func(s map[string]any) { manifestMap(manifestAt(s, "limiter2", "environment"))["REDIS_ULR"] = "x" })
		}, "REDIS_ULR"},
		{"compose: another service's variable", func(t *testing.T) []string {
			return composeWith(t, func(s map[string]any) { manifestMap(manifestAt(s, "detector", "environment"))["ADMIN_TOKEN"] = "x" })
		}, "ADMIN_TOKEN"},
		{"compose: missing mounted file", func(t *testing.T) []string {
			return composeWith(t, func(s map[string]any) {
				manifestMap(s["limiter3"])["volumes"] = []any{"./deploy/no-such-rules.yaml:/etc/ratewarden/rules.yaml:ro"}
			})
		}, "no-such-rules.yaml"},
		{"compose: rules not at RULES_FILE", func(t *testing.T) []string {
			return composeWith(t, func(s map[string]any) {
				manifestMap(manifestAt(s, "limiter1", "environment"))["RULES_FILE"] = "/etc/ratewarden/other.yaml"
			})
		}, "nothing is mounted at RULES_FILE"},
		{"compose: command instead of entrypoint", func(t *testing.T) []string {
			return composeWith(t, func(s map[string]any) { manifestMap(s["archiver"])["command"] = []any{"archiver"} })
		}, "takes no arguments"},
		{"kubernetes: misspelled variable", func(t *testing.T) []string {
			return kubeWith(t, func(c map[string]any) {
				c["env"] = append(manifestList(c["env"]), map[string]any{"name": "RULES_FIEL", "value": "x"})
			})
		}, "RULES_FIEL"},
		{"kubernetes: liveness on /readyz", func(t *testing.T) []string {
			return kubeWith(t, func(c map[string]any) { manifestMap(manifestAt(c, "livenessProbe", "httpGet"))["path"] = "/readyz" })
		}, "livenessProbe path"},
		{"kubernetes: rules mounted with subPath", func(t *testing.T) []string {
			return kubeWith(t, func(c map[string]any) { manifestMap(manifestList(c["volumeMounts"])[0])["subPath"] = "rules.yaml" })
		}, "subPath"},
		{"kubernetes: no memory limit", func(t *testing.T) []string {
			return kubeWith(t, func(c map[string]any) { delete(manifestMap(manifestAt(c, "resources", "limits")), "memory") })
		}, "resources.limits.memory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			problems := tt.check(t)
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tt.want) }) {
				t.Errorf("no problem mentions %q; got %q", tt.want, problems)
			}
		})
	}
}

var (
	manifestDockerEnv  = regexp.MustCompile(`(?m)^ENV\s+RULES_FILE=(\S+)`)
	manifestDockerCopy = regexp.MustCompile(`(?m)^COPY\s+deploy/rules\.example\.yaml\s+(\S+)`)
	manifestDockerUser = regexp.MustCompile(`(?m)^USER\s+(\d+)`)
	manifestDockerCmd  = regexp.MustCompile(`\./cmd/(\w+)`)
)

// The image builds every binary the compose file and the manifests start,
// runs as a non-root user, and its RULES_FILE names the rules it ships.
func TestManifestDockerfile(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(manifestRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	env, cp := manifestDockerEnv.FindSubmatch(data), manifestDockerCopy.FindSubmatch(data)
	if env == nil || cp == nil || string(env[1]) != string(cp[1]) {
		t.Errorf("RULES_FILE (%q) must name where deploy/rules.example.yaml is copied (%q)", env, cp)
	}
	if u := manifestDockerUser.FindSubmatch(data); u == nil || string(u[1]) == "0" {
		t.Error("the image must run as a numeric non-root USER (Kubernetes runAsNonRoot checks a number)")
	}
	built := map[string]bool{}
	for _, m := range manifestDockerCmd.FindAllSubmatch(data, -1) {
		built[string(m[1])] = true
		if _, err := os.Stat(filepath.Join(manifestRoot, "cmd", string(m[1]))); err != nil {
			t.Errorf("the Dockerfile builds ./cmd/%s: %v", m[1], err)
		}
	}
	var used []string
	for _, s := range manifestComposeServices(manifestLoadCompose(t)) {
		if s.binary != "" {
			used = append(used, s.binary)
		}
	}
	for _, o := range manifestLoadKube(t) {
		for _, c := range manifestList(manifestAt(o.doc, "spec", "template", "spec", "containers")) {
			if cmd := manifestStrings(manifestAt(c, "command")); len(cmd) > 0 {
				if !strings.HasPrefix(cmd[0], manifestBinDir) {
					t.Errorf("%s: command %s is not in %s", o, cmd[0], manifestBinDir)
				}
				used = append(used, path.Base(cmd[0]))
			}
		}
	}
	for _, b := range used {
		if !built[b] {
			t.Errorf("%s is started but the Dockerfile does not build ./cmd/%s", b, b)
		}
	}
}
