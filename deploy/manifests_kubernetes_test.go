// Static checks of the Kubernetes manifests in deploy/kubernetes.

package deploy_test

import (
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/config"
)

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
		image := manifestStr(manifestAt(c, "image"))
		probePaths := map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/healthz"}
		other, isOther := manifestOther(image)
		if isOther {
			probePaths = map[string]string{"readinessProbe": other.ready, "livenessProbe": other.healthy}
		}
		probePorts := map[string]string{} // probe -> port number
		for probe, want := range probePaths {
			get := manifestAt(c, probe, "httpGet")
			if got := manifestStr(manifestAt(get, "path")); got != want {
				report("%s: %s path %q, want %s", where, probe, got, want)
				continue
			}
			p, ok := ports[manifestStr(manifestAt(get, "port"))]
			if !ok {
				report("%s: %s port %v is none of the container's ports", where, probe, manifestAt(get, "port"))
				continue
			}
			probePorts[probe] = p
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
		if isOther {
			// Not ratewarden's: pinned to a release, configured by its
			// own checks (manifests_alerting_test.go).
			if _, tag, _ := strings.Cut(image, ":"); tag == "" || tag == "latest" {
				report("%s: image %s, want a release tag", where, image)
			}
			continue
		}
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
		// A ConfigMap or Secret given whole (envFrom) is shared by the
		// Deployments: each of its variables must be read by one service
		// (REDIS_URL: not by the archiver); those set one by one, by this
		// one.
		own := map[string]bool{}
		for _, e := range manifestList(manifestAt(c, "env")) {
			own[manifestStr(manifestAt(e, "name"))] = true
		}
		unknown := slices.DeleteFunc(manifestUnknownEnv(cfg, binary, names), func(n string) bool {
			return !own[n] && manifestReadByAny(cfg, n)
		})
		if len(unknown) > 0 {
			report("%s: environment variables the %s does not read: %s", where, binary, strings.Join(unknown, ", "))
		}
		// Probes and metrics are on OPS_LISTEN_ADDR when it is set.
		listen, opsVar := env["LISTEN_ADDR"], "LISTEN_ADDR"
		if env["OPS_LISTEN_ADDR"] != "" {
			opsVar = "OPS_LISTEN_ADDR"
		}
		if listen == "" {
			report("%s: set LISTEN_ADDR explicitly (the %s's default is %s)", where, binary, cfg.listen[binary])
		} else {
			opsPort := manifestPort(env[opsVar])
			for _, probe := range slices.Sorted(maps.Keys(probePorts)) {
				if probePorts[probe] != opsPort {
					report("%s: %s %s but the %s uses port %s", where, opsVar, env[opsVar], probe, probePorts[probe])
				}
			}
			if scrape := manifestStr(manifestAt(d.doc, "spec", "template", "metadata", "annotations", "prometheus.io/port")); scrape != "" && scrape != opsPort {
				report("%s: %s %s but prometheus.io/port is %s", where, opsVar, env[opsVar], scrape)
			}
		}
		if binary == "limiter" || binary == "detector" {
			problems = append(problems, manifestKubeRulesProblems(objs, pod, c, env["RULES_FILE"], where)...)
		}
		if binary == "limiter" {
			problems = append(problems, manifestWarmupProblems(c, env["REDIS_WARMUP_TIMEOUT"], where)...)
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
	for _, kind := range []string{"Namespace", "ConfigMap", "Secret", "Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler", "NetworkPolicy"} {
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

// manifestStartMargin is what a limiter's start may take besides the Redis
// warm-up (rules, the rule database) before it listens.
const manifestStartMargin = 10 * time.Second

// manifestWarmupProblems checks that the kubelet does not kill a limiter
// still warming up: it opens no port before the warm-up has ended (at most
// REDIS_WARMUP_TIMEOUT), so every probe fails meanwhile, and the liveness
// probe starts only once the startup probe (if any) has succeeded.
func manifestWarmupProblems(c any, warmupEnv, where string) []string {
	cfg, err := config.LoadLimiter(func(k string) string {
		if k == "REDIS_WARMUP_TIMEOUT" {
			return warmupEnv
		}
		return ""
	})
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", where, err)}
	}
	probe := "startupProbe"
	if manifestAt(c, probe) == nil {
		probe = "livenessProbe"
	}
	seconds := func(field string, def int) int {
		if n, err := strconv.Atoi(manifestStr(manifestAt(c, probe, field))); err == nil {
			return n
		}
		return def
	}
	// Kubernetes' defaults: periodSeconds 10, failureThreshold 3.
	budget := time.Duration(seconds("initialDelaySeconds", 0)+seconds("periodSeconds", 10)*seconds("failureThreshold", 3)) * time.Second
	if budget < cfg.RedisWarmup+manifestStartMargin {
		return []string{fmt.Sprintf("%s: the %s gives a start %v before the kubelet kills the pod, want REDIS_WARMUP_TIMEOUT (%v) + %v at least",
			where, probe, budget, cfg.RedisWarmup, manifestStartMargin)}
	}
	return nil
}
