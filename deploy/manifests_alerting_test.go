// Static checks of how the compose file and the Kubernetes manifests run
// Alertmanager: its configuration, templates and secret files where
// deploy/alertmanager/alertmanager.yml expects them, and Prometheus sending
// to it.

package deploy_test

import (
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// amDefaultPort is the port Alertmanager listens on without
// --web.listen-address.
const amDefaultPort = "9093"

// amSecretFiles returns the files under /run/secrets/ the configuration
// reads, by their base name.
func amSecretFiles(tb testing.TB) []string {
	tb.Helper()
	var cfg map[string]any
	obsReadYAML(tb, amConfigFile, &cfg)
	var files []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if f := manifestStr(e); strings.HasSuffix(k, "_file") && strings.HasPrefix(f, amSecretsDir) {
					files = append(files, strings.TrimPrefix(f, amSecretsDir))
				}
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(cfg)
	slices.Sort(files)
	files = slices.Compact(files)
	if len(files) == 0 {
		tb.Fatalf("%s reads no secret file under %s", amConfigFile, amSecretsDir)
	}
	return files
}

// amTemplateDirs returns the directories of the configuration's template
// globs.
func amTemplateDirs(tb testing.TB) []string {
	tb.Helper()
	var cfg map[string]any
	obsReadYAML(tb, amConfigFile, &cfg)
	var dirs []string
	for _, g := range manifestStrings(cfg["templates"]) {
		dirs = append(dirs, path.Dir(g))
	}
	return dirs
}

// amFlag returns the value of --name=value among args, or "".
func amFlag(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// amListenPort is the port of --web.listen-address, or the default.
func amListenPort(args []string) string {
	if a := amFlag(args, "web.listen-address"); a != "" {
		return manifestPort(a)
	}
	return amDefaultPort
}

// The compose file runs Alertmanager with the shipped configuration and
// templates where the configuration names them, grants it every secret the
// configuration reads (as compose secrets whose default files exist), and
// Prometheus sends its alerts to it.
func TestManifestComposeAlertmanager(t *testing.T) {
	compose := manifestLoadCompose(t)
	services := manifestComposeServices(compose)
	am := services["alertmanager"]
	if am == nil {
		t.Fatal("no alertmanager service")
	}
	if img := manifestStr(am.raw["image"]); !strings.HasPrefix(img, "prom/alertmanager:v") {
		t.Errorf("alertmanager: image %q, want prom/alertmanager at a release tag", img)
	}
	args := manifestStrings(am.raw["command"])
	mounts := manifestComposeMounts(am.raw)
	mountedFrom := map[string]string{} // target -> source
	for src, dst := range mounts {
		mountedFrom[dst] = path.Clean(src)
	}
	if cfg := amFlag(args, "config.file"); mountedFrom[cfg] != "deploy/alertmanager/alertmanager.yml" {
		t.Errorf("alertmanager: --config.file=%s is mounted from %q, want ./%s", cfg, mountedFrom[cfg], "deploy/"+amConfigFile)
	}
	for _, dir := range amTemplateDirs(t) {
		if mountedFrom[dir] != "deploy/"+amTemplatesDir {
			t.Errorf("alertmanager: the templates' directory %s is mounted from %q, want ./deploy/%s", dir, mountedFrom[dir], amTemplatesDir)
		}
	}

	granted := map[string]bool{}
	for _, s := range manifestList(am.raw["secrets"]) {
		name := manifestStr(s)
		if m := manifestMap(s); m != nil {
			name = manifestStr(m["source"])
			if tg := manifestStr(m["target"]); tg != "" && tg != name {
				t.Errorf("alertmanager: secret %s mounted as %s; the configuration reads %s%s", name, tg, amSecretsDir, name)
			}
		}
		granted[name] = true
	}
	secrets := manifestMap(compose["secrets"])
	for _, f := range amSecretFiles(t) {
		if !granted[f] {
			t.Errorf("alertmanager: the configuration reads %s%s, but the service is not granted the secret %s", amSecretsDir, f, f)
		}
		file := manifestStr(manifestAt(secrets[f], "file"))
		if d := manifestComposeDefaultPrefix(file); d != "" {
			file = d
		}
		if file == "" {
			t.Errorf("secret %s: no file", f)
			continue
		}
		if _, err := os.Stat(filepath.Join(manifestRoot, filepath.FromSlash(file))); err != nil {
			t.Errorf("secret %s: its default file: %v", f, err)
		}
	}

	amPort := amListenPort(args)
	targets := amPrometheusTargets(t)
	if len(targets) == 0 {
		t.Error("prometheus.yml sends alerts to no Alertmanager")
	}
	for _, target := range targets {
		host, port, err := net.SplitHostPort(target)
		if err != nil {
			t.Errorf("alertmanager target %q: %v", target, err)
			continue
		}
		if host != am.name || port != amPort {
			t.Errorf("prometheus sends alerts to %s, want %s:%s", target, am.name, amPort)
		}
	}
}

// manifestComposeDefaultPrefix resolves a value that starts with an
// interpolated variable with a default, ${VAR:-default}/rest, to
// default/rest; "" when it does not.
func manifestComposeDefaultPrefix(v string) string {
	rest, ok := strings.CutPrefix(v, "${")
	if !ok {
		return ""
	}
	inner, tail, ok := strings.Cut(rest, "}")
	if !ok {
		return ""
	}
	_, def, ok := strings.Cut(inner, ":-")
	if !ok {
		return ""
	}
	return def + tail
}

// amPrometheusTargets are the Alertmanagers of prometheus.yml.
func amPrometheusTargets(tb testing.TB) []string {
	tb.Helper()
	var cfg map[string]any
	obsReadYAML(tb, obsPromConfigFile, &cfg)
	var targets []string
	for _, am := range manifestList(manifestAt(cfg, "alerting", "alertmanagers")) {
		for _, sc := range manifestList(manifestAt(am, "static_configs")) {
			targets = append(targets, manifestStrings(manifestAt(sc, "targets"))...)
		}
	}
	return targets
}

// The Kubernetes Alertmanager runs copies of the shipped configuration and
// templates (ConfigMaps, the same bytes), mounted where its arguments and
// the configuration name them, and a Secret holding every file the
// configuration reads, mounted at /run/secrets; a Service reaches it.
func TestManifestKubernetesAlertmanager(t *testing.T) {
	for _, p := range manifestKubeAlertmanagerProblems(t, manifestLoadKube(t)) {
		t.Error(p)
	}
}

func manifestKubeAlertmanagerProblems(tb testing.TB, objs []manifestKubeObject) []string {
	tb.Helper()
	var problems []string
	report := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	d, ok := manifestFind(objs, "Deployment", "alertmanager")
	if !ok {
		return []string{"no alertmanager Deployment"}
	}
	pod := manifestAt(d.doc, "spec", "template", "spec")
	containers := manifestList(manifestAt(pod, "containers"))
	if len(containers) != 1 {
		return []string{fmt.Sprintf("%s: %d containers, want 1", d, len(containers))}
	}
	c := containers[0]
	args := manifestStrings(manifestAt(c, "args"))
	if got := manifestStrings(manifestAt(c, "command")); got != nil {
		report("%s: command %v overrides the image's", d, got)
	}

	// The volume mounted at dir: its ConfigMap or Secret.
	source := func(dir string) (kind, name string, subPath bool) {
		for _, m := range manifestList(manifestAt(c, "volumeMounts")) {
			if manifestStr(manifestAt(m, "mountPath")) != dir {
				continue
			}
			for _, v := range manifestList(manifestAt(pod, "volumes")) {
				if manifestStr(manifestAt(v, "name")) != manifestStr(manifestAt(m, "name")) {
					continue
				}
				subPath = manifestAt(m, "subPath") != nil
				if n := manifestStr(manifestAt(v, "configMap", "name")); n != "" {
					return "ConfigMap", n, subPath
				}
				return "Secret", manifestStr(manifestAt(v, "secret", "secretName")), subPath
			}
		}
		return "", "", false
	}
	// want: the files of the repository the object at dir must hold.
	check := func(what, dir, wantKind string, want map[string]string) {
		kind, name, subPath := source(dir)
		switch {
		case kind == "":
			report("%s: nothing is mounted at %s (%s)", d, dir, what)
			return
		case kind != wantKind:
			report("%s: %s (%s) is a %s, want a %s", d, dir, what, kind, wantKind)
			return
		case subPath:
			report("%s: %s (%s) is mounted with subPath, which never sees an update", d, dir, what)
		}
		o, ok := manifestFind(objs, kind, name)
		if !ok {
			report("%s: %s %s (at %s) does not exist", d, kind, name, dir)
			return
		}
		keys := manifestKeys(o)
		for k, file := range want {
			got, ok := keys[k]
			switch {
			case !ok:
				report("%s: no key %s (%s)", o, k, what)
			case file == "":
			default:
				b, err := os.ReadFile(file)
				if err != nil {
					report("%v", err)
				} else if got != string(b) {
					report("%s: key %s differs from %s: copy the file again", o, k, file)
				}
			}
		}
	}

	cfg := amFlag(args, "config.file")
	if cfg == "" {
		report("%s: no --config.file", d)
	} else {
		check("the configuration", path.Dir(cfg), "ConfigMap", map[string]string{path.Base(cfg): amConfigFile})
	}
	tmpls, err := filepath.Glob(filepath.Join(amTemplatesDir, "*.tmpl"))
	if err != nil || len(tmpls) == 0 {
		report("no templates in %s: %v", amTemplatesDir, err)
	}
	want := map[string]string{}
	for _, f := range tmpls {
		want[filepath.Base(f)] = f
	}
	for _, dir := range amTemplateDirs(tb) {
		check("the templates", dir, "ConfigMap", want)
	}
	secrets := map[string]string{}
	for _, f := range amSecretFiles(tb) {
		secrets[f] = ""
	}
	check("the secrets", strings.TrimSuffix(amSecretsDir, "/"), "Secret", secrets)
	if manifestAt(pod, "automountServiceAccountToken") != false {
		report("%s: automountServiceAccountToken is not false (the service account token would share /run/secrets)", d)
	}

	port := amListenPort(args)
	served := false
	for _, o := range objs {
		if o.kind() != "Service" || !manifestSelects(manifestMap(manifestAt(o.doc, "spec", "selector")), manifestMap(manifestAt(d.doc, "spec", "template", "metadata", "labels"))) {
			continue
		}
		for _, p := range manifestList(manifestAt(o.doc, "spec", "ports")) {
			if manifestStr(manifestAt(p, "port")) == port {
				served = true
			}
		}
	}
	if !served {
		report("%s: no Service reaches its port %s", d, port)
	}
	return problems
}

// The check above catches a configuration copy out of date, a secret the
// Secret lacks and a missing mount.
func TestManifestKubernetesAlertmanagerCatchesMistakes(t *testing.T) {
	edit := func(t *testing.T, kind, name string, change func(doc map[string]any)) []string {
		t.Helper()
		objs := manifestLoadKube(t)
		o, ok := manifestFind(objs, kind, name)
		if !ok {
			t.Fatalf("no %s %s", kind, name)
		}
		change(o.doc)
		return manifestKubeAlertmanagerProblems(t, objs)
	}
	for _, tt := range []struct {
		name, kind, object, want string
		change                   func(doc map[string]any)
	}{
		{"stale configuration", "ConfigMap", "alertmanager-config", "differs from",
			func(doc map[string]any) { manifestMap(doc["data"])["alertmanager.yml"] = "route: {receiver: x}\n" }},
		{"secret without the Slack URL", "Secret", "alertmanager-secrets", "no key alertmanager_slack_api_url",
			func(doc map[string]any) { delete(manifestMap(doc["stringData"]), "alertmanager_slack_api_url") }},
		{"templates not mounted", "Deployment", "alertmanager", "nothing is mounted at /etc/alertmanager/templates",
			func(doc map[string]any) {
				c := manifestMap(manifestList(manifestAt(doc, "spec", "template", "spec", "containers"))[0])
				c["volumeMounts"] = slices.DeleteFunc(manifestList(c["volumeMounts"]), func(m any) bool {
					return manifestStr(manifestAt(m, "name")) == "templates"
				})
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			problems := edit(t, tt.kind, tt.object, tt.change)
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tt.want) }) {
				t.Errorf("no problem mentions %q; got %q", tt.want, problems)
			}
		})
	}
}
