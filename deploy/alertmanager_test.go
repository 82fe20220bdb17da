package deploy_test

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/ratewarden/ratewarden/internal/testkit"
)

// The Alertmanager configuration and its templates, relative to this
// package's directory.
const (
	amConfigFile   = "alertmanager/alertmanager.yml"
	amTemplatesDir = "alertmanager/templates"
	amSecretsDir   = "/run/secrets/" // where compose and Kubernetes mount the secrets
)

// amReceiverKinds are the integrations each severity's receiver must
// reach (docs/notifications.md): the more urgent, the more people.
var amReceiverKinds = map[string][]string{
	"critical": {"email_configs", "slack_configs", "webhook_configs"},
	"warning":  {"slack_configs", "webhook_configs"},
	"info":     {"webhook_configs"},
}

// amSecretFields are the settings of an integration that hold a secret,
// and the *_file settings that must be used instead.
var amSecretFields = map[string]string{
	"api_url":       "api_url_file",
	"auth_password": "auth_password_file",
	"credentials":   "credentials_file",
	"password":      "password_file",
}

// TestAlertmanagerCheckConfig validates the configuration and its templates
// with amtool (Debian package prometheus-alertmanager). Without amtool the
// test fails when CI is set and is skipped otherwise.
func TestAlertmanagerCheckConfig(t *testing.T) {
	amtool := amTool(t)
	obsRun(t, ".", amtool, "check-config", amLocalConfig(t))
}

// TestAlertmanagerRoutesBySeverity asks amtool where each shipped alert
// goes, with its own labels: to the receiver named after its severity.
func TestAlertmanagerRoutesBySeverity(t *testing.T) {
	amtool := amTool(t)
	cfg := amLocalConfig(t)
	for _, r := range obsLoadAlertRules(t) {
		if r.Alert == "" {
			continue
		}
		t.Run(r.Alert, func(t *testing.T) {
			args := []string{"config", "routes", "test", "--config.file=" + cfg, "alertname=" + r.Alert}
			for k, v := range r.Labels {
				args = append(args, k+"="+v)
			}
			out, err := exec.Command(amtool, args...).Output()
			if err != nil {
				t.Fatalf("amtool %s: %v", strings.Join(args, " "), err)
			}
			if got, want := strings.TrimSpace(string(out)), r.Labels["severity"]; got != want {
				t.Errorf("alert %s (severity %s) goes to receiver %q, want %q", r.Alert, want, got, want)
			}
		})
	}
}

// TestAlertmanagerReceivers checks what amtool cannot: each severity's
// receiver reaches the integrations of amReceiverKinds, every integration
// sends resolved notifications, every secret is read from a file under
// /run/secrets/, and every template the configuration names is defined.
func TestAlertmanagerReceivers(t *testing.T) {
	var cfg map[string]any
	obsReadYAML(t, amConfigFile, &cfg)
	receivers := map[string]map[string]any{}
	for _, r := range manifestList(cfg["receivers"]) {
		receivers[manifestStr(manifestAt(r, "name"))] = manifestMap(r)
	}
	for _, sev := range obsSeverities {
		r, ok := receivers[sev]
		if !ok {
			t.Errorf("no receiver %s", sev)
			continue
		}
		var kinds []string
		for k := range r {
			if strings.HasSuffix(k, "_configs") {
				kinds = append(kinds, k)
			}
		}
		slices.Sort(kinds)
		if want := amReceiverKinds[sev]; !slices.Equal(kinds, want) {
			t.Errorf("receiver %s: integrations %v, want %v", sev, kinds, want)
		}
		for _, kind := range kinds {
			for i, c := range manifestList(r[kind]) {
				if manifestAt(c, "send_resolved") != true {
					t.Errorf("receiver %s %s[%d]: send_resolved is not true", sev, kind, i)
				}
			}
		}
	}
	for _, p := range amSecretProblems(cfg, "") {
		t.Error(p)
	}

	defined := amDefinedTemplates(t)
	raw, err := os.ReadFile(amConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	used := regexp.MustCompile(`template "([^"]+)"`).FindAllStringSubmatch(string(raw), -1)
	if len(used) == 0 {
		t.Errorf("%s uses none of the templates of %s", amConfigFile, amTemplatesDir)
	}
	for _, m := range used {
		if !defined[m[1]] {
			t.Errorf("%s uses template %q, which %s does not define", amConfigFile, m[1], amTemplatesDir)
		}
	}
}

// TestAlertmanagerSecretCheck shows the check above catches a secret
// written into the configuration and a file outside /run/secrets/.
func TestAlertmanagerSecretCheck(t *testing.T) {
	for _, tt := range []struct {
		name, yaml, want string
	}{
		{"inline Slack URL", `{receivers: [{name: x, slack_configs: [{api_url: "https://hooks.slack.com/x"}]}]}`, "api_url"},
		{"inline SMTP password", `{global: {smtp_auth_password: p}}`, "smtp_auth_password"},
		{"inline bearer token", `{receivers: [{name: x, webhook_configs: [{http_config: {authorization: {credentials: t}}}]}]}`, "credentials"},
		{"file elsewhere", `{receivers: [{name: x, email_configs: [{auth_password_file: /etc/p}]}]}`, "/etc/p"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var cfg map[string]any
			if err := yaml.Unmarshal([]byte(tt.yaml), &cfg); err != nil {
				t.Fatal(err)
			}
			got := amSecretProblems(cfg, "")
			if len(got) != 1 || !strings.Contains(got[0], tt.want) {
				t.Errorf("amSecretProblems = %q, want one problem naming %q", got, tt.want)
			}
		})
	}
}

// amSecretProblems walks the configuration: a secret setting given inline,
// or a *_file setting outside /run/secrets/, is a problem.
func amSecretProblems(v any, where string) []string {
	var problems []string
	switch v := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			at := strings.TrimPrefix(where+"."+k, ".")
			bare := strings.TrimPrefix(strings.TrimPrefix(k, "smtp_"), "slack_")
			if file, secret := amSecretFields[bare]; secret {
				problems = append(problems, at+": a secret in the configuration; read it from a file ("+file+")")
				continue
			}
			if _, secret := amSecretFields[strings.TrimSuffix(bare, "_file")]; secret && strings.HasSuffix(k, "_file") {
				if f := manifestStr(v[k]); !strings.HasPrefix(f, amSecretsDir) {
					problems = append(problems, at+": "+f+" is not under "+amSecretsDir)
				}
			}
			problems = append(problems, amSecretProblems(v[k], at)...)
		}
	case []any:
		for _, e := range v {
			problems = append(problems, amSecretProblems(e, where)...)
		}
	}
	return problems
}

// amDefinedTemplates returns the names the template files define.
func amDefinedTemplates(tb testing.TB) map[string]bool {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join(amTemplatesDir, "*.tmpl"))
	if err != nil || len(files) == 0 {
		tb.Fatalf("no templates in %s: %v", amTemplatesDir, err)
	}
	defined := map[string]bool{}
	define := regexp.MustCompile(`\{\{-?\s*define\s+"([^"]+)"`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		for _, m := range define.FindAllStringSubmatch(string(b), -1) {
			defined[m[1]] = true
		}
	}
	return defined
}

// amTool returns the path of amtool. Without it the test fails when the CI
// variable is set and is skipped otherwise.
func amTool(tb testing.TB) string {
	tb.Helper()
	path, err := exec.LookPath("amtool")
	if err == nil {
		return path
	}
	testkit.Unavailable(tb, "amtool not found (Debian/Ubuntu: apt-get install prometheus-alertmanager): %v", err)
	return ""
}

// amLocalConfig writes a copy of the configuration whose templates are
// those of this directory (the container reads them from
// /etc/alertmanager/templates), so that amtool parses them too, and returns
// its path.
func amLocalConfig(tb testing.TB) string {
	tb.Helper()
	var cfg map[string]any
	obsReadYAML(tb, amConfigFile, &cfg)
	dir, err := filepath.Abs(amTemplatesDir)
	if err != nil {
		tb.Fatal(err)
	}
	tmpls := manifestStrings(cfg["templates"])
	if len(tmpls) == 0 {
		tb.Fatalf("%s: no templates", amConfigFile)
	}
	for i, p := range tmpls {
		tmpls[i] = filepath.Join(dir, filepath.Base(p))
	}
	cfg["templates"] = tmpls
	return amWriteYAML(tb, cfg)
}

// amWriteYAML writes v into a file of the test's temporary directory.
func amWriteYAML(tb testing.TB, v any) string {
	tb.Helper()
	out, err := yaml.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	path := filepath.Join(tb.TempDir(), "alertmanager.yml")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}
