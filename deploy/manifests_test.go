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
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/ratewarden/ratewarden/internal/config"
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

// manifestOtherImages are the images of the Kubernetes deployment that are
// not ratewarden's, with the paths of their readiness and liveness probes.
var manifestOtherImages = map[string]manifestOtherImage{
	"prom/alertmanager": {ready: "/-/ready", healthy: "/-/healthy"},
}

type manifestOtherImage struct{ ready, healthy string }

// manifestOther returns what is known of image when it is not
// ratewarden's, and whether it is such a known image.
func manifestOther(image string) (manifestOtherImage, bool) {
	repo, _, _ := strings.Cut(image, ":")
	o, ok := manifestOtherImages[repo]
	return o, ok
}

// manifestRuntimeEnv are read by the Go runtime, not by internal/config.
var manifestRuntimeEnv = []string{"GOMAXPROCS", "GOMEMLIMIT", "GOGC", "GODEBUG"}

// manifestShelllessImages have no shell or HTTP client for a healthcheck.
var manifestShelllessImages = []string{"traefik/whoami", "hashicorp/http-echo"}

// manifestConfig is what internal/config says each service reads.
type manifestConfig struct {
	env    map[string]map[string]bool // service -> variable names
	listen map[string]string          // service -> default LISTEN_ADDR
}

// manifestServices are the processes the image runs from internal/config's
// table; loadgen reads flags only.
var manifestServices = []config.Process{config.LimiterProcess, config.DetectorProcess, config.ArchiverProcess, config.NotifierProcess, config.ConsoleProcess}

// manifestLoadConfig asks internal/config's table which variables each
// service reads, and its default LISTEN_ADDR.
func manifestLoadConfig(t testing.TB) manifestConfig {
	t.Helper()
	cfg := manifestConfig{env: map[string]map[string]bool{"loadgen": {}}, listen: map[string]string{}}
	for _, p := range manifestServices {
		s := string(p)
		cfg.env[s] = map[string]bool{}
		for _, n := range manifestRuntimeEnv {
			cfg.env[s][n] = true
		}
		for _, v := range config.Vars(p) {
			cfg.env[s][v.Name] = true
			if v.Name == "LISTEN_ADDR" {
				cfg.listen[s] = v.Default
			}
		}
		if cfg.listen[s] == "" {
			t.Fatalf("internal/config gives the %s no default LISTEN_ADDR", s)
		}
	}
	return cfg
}

// manifestReadByAny reports whether some service reads name.
func manifestReadByAny(cfg manifestConfig, name string) bool {
	for _, p := range manifestServices {
		if cfg.env[string(p)][name] {
			return true
		}
	}
	return false
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
	policiesWith := func(t *testing.T, edit func(objs []manifestKubeObject) []manifestKubeObject) []string {
		t.Helper()
		return manifestNetworkPolicyProblems(edit(manifestLoadKube(t)))
	}
	policy := func(t *testing.T, objs []manifestKubeObject, name string) map[string]any {
		t.Helper()
		o, ok := manifestFind(objs, "NetworkPolicy", name)
		if !ok {
			t.Fatalf("no NetworkPolicy %s", name)
		}
		return o.doc
	}
	tests := []struct {
		name  string
		check func(t *testing.T) []string
		want  string
	}{
		{"compose: a limiter without API_TOKENS", func(t *testing.T) []string {
			return composeWith(t, func(s map[string]any) { delete(manifestMap(manifestAt(s, "limiter2", "environment")), "API_TOKENS") })
		}, "limiter2: no API_TOKENS"},
		{"compose: the gateway's token variable unset", func(t *testing.T) []string {
			return composeWith(t, func(s map[string]any) {
				delete(manifestMap(manifestAt(s, "nginx", "environment")), "RATEWARDEN_API_TOKEN")
			})
		}, "RATEWARDEN_API_TOKEN"},
		{"compose: load generator without a token", func(t *testing.T) []string {
			return composeWith(t, func(s map[string]any) { manifestMap(s["loadgen"])["command"] = []any{"-url", "http://limiter1:8080"} })
		}, "loadgen: no -token"},
		{"kubernetes: probes off the ops port", func(t *testing.T) []string {
			return kubeWith(t, func(c map[string]any) { manifestMap(manifestAt(c, "readinessProbe", "httpGet"))["port"] = "http" })
		}, "OPS_LISTEN_ADDR :9090 but the readinessProbe uses port 8080"},
		{"kubernetes: policy port the pods lack", func(t *testing.T) []string {
			return policiesWith(t, func(objs []manifestKubeObject) []manifestKubeObject {
				port := manifestMap(manifestList(manifestAt(manifestList(manifestAt(policy(t, objs, "limiter-ops-from-prometheus"), "spec", "ingress"))[0], "ports"))[0])
				port["port"] = "metrics"
				return objs
			})
		}, "port metrics is no port of limiter"},
		{"kubernetes: decision port open to Prometheus", func(t *testing.T) []string {
			return policiesWith(t, func(objs []manifestKubeObject) []manifestKubeObject {
				dec := manifestMap(manifestList(manifestAt(policy(t, objs, "limiter-decisions-from-gateway"), "spec", "ingress"))[0])
				prom := manifestList(manifestAt(manifestList(manifestAt(policy(t, objs, "detector-metrics-from-prometheus"), "spec", "ingress"))[0], "from"))
				dec["from"] = append(manifestList(dec["from"]), prom...)
				return objs
			})
		}, "both admit"},
		{"kubernetes: no default deny", func(t *testing.T) []string {
			return policiesWith(t, func(objs []manifestKubeObject) []manifestKubeObject {
				return slices.DeleteFunc(objs, func(o manifestKubeObject) bool { return o.name() == "ratewarden-default-deny-ingress" })
			})
		}, "no default-deny policy"},
		{"kubernetes: policy selecting no pods", func(t *testing.T) []string {
			return policiesWith(t, func(objs []manifestKubeObject) []manifestKubeObject {
				manifestMap(manifestAt(policy(t, objs, "archiver-metrics-from-prometheus"), "spec", "podSelector", "matchLabels"))["app.kubernetes.io/component"] = "archivr"
				return objs
			})
		}, "selects no Deployment's pods"},
		{"kubernetes: a port open to any peer", func(t *testing.T) []string {
			return policiesWith(t, func(objs []manifestKubeObject) []manifestKubeObject {
				delete(manifestMap(manifestList(manifestAt(policy(t, objs, "limiter-decisions-from-gateway"), "spec", "ingress"))[0]), "from")
				return objs
			})
		}, "admits every peer"},
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
		{"kubernetes: another service's variable", func(t *testing.T) []string {
			return kubeWith(t, func(c map[string]any) {
				c["env"] = append(manifestList(c["env"]), map[string]any{"name": "ARCHIVER_GROUP_ID", "value": "x"})
			})
		}, "ARCHIVER_GROUP_ID"},
		{"kubernetes: a shared ConfigMap's variable no service reads", func(t *testing.T) []string {
			objs := manifestLoadKube(t)
			cm, ok := manifestFind(objs, "ConfigMap", "ratewarden-env")
			if !ok {
				t.Fatal("no ConfigMap ratewarden-env")
			}
			manifestMap(cm.doc["data"])["REDIS_ULR"] = "x"
			return manifestKubeProblems(objs, cfg)
		}, "REDIS_ULR"},
		{"kubernetes: liveness on /readyz", func(t *testing.T) []string {
			return kubeWith(t, func(c map[string]any) { manifestMap(manifestAt(c, "livenessProbe", "httpGet"))["path"] = "/readyz" })
		}, "livenessProbe path"},
		{"kubernetes: rules mounted with subPath", func(t *testing.T) []string {
			return kubeWith(t, func(c map[string]any) { manifestMap(manifestList(c["volumeMounts"])[0])["subPath"] = "rules.yaml" })
		}, "subPath"},
		{"kubernetes: startup shorter than the warm-up", func(t *testing.T) []string {
			return kubeWith(t, func(c map[string]any) {
				c["env"] = append(manifestList(c["env"]), map[string]any{"name": "REDIS_WARMUP_TIMEOUT", "value": "2m"})
			})
		}, "REDIS_WARMUP_TIMEOUT"},
		{"kubernetes: no startup probe, liveness too soon", func(t *testing.T) []string {
			return kubeWith(t, func(c map[string]any) {
				delete(c, "startupProbe")
				manifestMap(c["livenessProbe"])["failureThreshold"] = 1
			})
		}, "livenessProbe gives a start"},
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
