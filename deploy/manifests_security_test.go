// Static checks of what protects the deployment: the Kubernetes
// NetworkPolicies against the pods and ports that exist, and the token
// placeholders the deployment files ship against what the limiter accepts.

package deploy_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/internal/config"
)

// manifestPolicyPort is one port of one Deployment, as a NetworkPolicy
// admits it.
type manifestPolicyPort struct{ deployment, port string } // port: the containerPort number

// manifestNetworkPolicyProblems checks the NetworkPolicies against the
// Deployments: every policy selects pods that exist and names ports they
// have; a default deny covers every pod; the limiter's decision port
// (LISTEN_ADDR) and its ops port (OPS_LISTEN_ADDR) admit different, named
// peers; the decision port admits besides the console's pods alone (its
// admin API), the gRPC port not; the console's pages admit the gateway, as
// the decision port does, and its metrics are on an ops port of their own;
// every metrics port admits the same peers (Prometheus), never those of the
// decision port; and no other port is open.
func manifestNetworkPolicyProblems(objs []manifestKubeObject) []string {
	var problems []string
	report := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	type pod struct {
		labels      map[string]any
		ports       map[string]string // name and number -> number
		listen, ops string            // ports of LISTEN_ADDR and OPS_LISTEN_ADDR ("" if unset)
		grpc        string            // port of GRPC_LISTEN_ADDR (Envoy's rate limit API; "" if unset)
		binary      string
	}
	pods := map[string]pod{}
	for _, d := range objs {
		if d.kind() != "Deployment" {
			continue
		}
		p := pod{labels: manifestMap(manifestAt(d.doc, "spec", "template", "metadata", "labels")), ports: map[string]string{}, binary: manifestDefaultBin}
		for _, c := range manifestList(manifestAt(d.doc, "spec", "template", "spec", "containers")) {
			for _, cp := range manifestList(manifestAt(c, "ports")) {
				n := manifestStr(manifestAt(cp, "containerPort"))
				p.ports[n] = n
				if name := manifestStr(manifestAt(cp, "name")); name != "" {
					p.ports[name] = n
				}
			}
			if cmd := manifestStrings(manifestAt(c, "command")); len(cmd) > 0 {
				p.binary = filepath.Base(cmd[0])
			}
			if _, other := manifestOther(manifestStr(manifestAt(c, "image"))); other {
				// Another image's port is where Prometheus scrapes it
				// (Alertmanager's also takes Prometheus's alerts).
				p.binary, p.listen = "", manifestStr(manifestAt(d.doc, "spec", "template", "metadata", "annotations", "prometheus.io/port"))
				continue
			}
			env, _ := manifestContainerEnv(objs, c)
			p.listen, p.ops = manifestPort(env["LISTEN_ADDR"]), manifestPort(env["OPS_LISTEN_ADDR"])
			p.grpc = manifestPort(env["GRPC_LISTEN_ADDR"])
		}
		pods[d.name()] = p
	}
	names := slices.Sorted(maps.Keys(pods))

	allowed := map[manifestPolicyPort]map[string]bool{} // -> peers (canonical JSON)
	denied := map[string]bool{}                         // Deployments under a default deny
	var policies int
	for _, o := range objs {
		if o.kind() != "NetworkPolicy" {
			continue
		}
		policies++
		sel := manifestMap(manifestAt(o.doc, "spec", "podSelector"))
		if manifestAt(sel, "matchExpressions") != nil {
			report("%s: matchExpressions are not checked here; use matchLabels", o)
			continue
		}
		var selected []string
		for _, n := range names {
			if labels := manifestMap(manifestAt(sel, "matchLabels")); len(labels) == 0 || manifestSelects(labels, pods[n].labels) {
				selected = append(selected, n)
			}
		}
		if len(selected) == 0 {
			report("%s: its podSelector selects no Deployment's pods", o)
			continue
		}
		if !slices.Contains(manifestStrings(manifestAt(o.doc, "spec", "policyTypes")), "Ingress") {
			report("%s: policyTypes lacks Ingress", o)
		}
		rules := manifestList(manifestAt(o.doc, "spec", "ingress"))
		if len(rules) == 0 {
			for _, n := range selected {
				denied[n] = true
			}
		}
		for i, r := range rules {
			from := manifestList(manifestAt(r, "from"))
			if len(from) == 0 {
				report("%s: ingress[%d] admits every peer (no from)", o, i)
			}
			ports := manifestList(manifestAt(r, "ports"))
			if len(ports) == 0 {
				report("%s: ingress[%d] admits every port (no ports)", o, i)
			}
			for _, peer := range from {
				if manifestAt(peer, "ipBlock") != nil || (manifestAt(peer, "podSelector") == nil && manifestAt(peer, "namespaceSelector") == nil) {
					report("%s: ingress[%d]: a peer must be named by namespace and pod selectors", o, i)
				}
			}
			for _, pt := range ports {
				name := manifestStr(manifestAt(pt, "port"))
				for _, n := range selected {
					num, ok := pods[n].ports[name]
					if !ok {
						report("%s: ingress[%d] port %s is no port of %s", o, i, name, n)
						continue
					}
					k := manifestPolicyPort{n, num}
					if allowed[k] == nil {
						allowed[k] = map[string]bool{}
					}
					for _, peer := range from {
						b, _ := json.Marshal(peer)
						allowed[k][string(b)] = true
					}
				}
			}
		}
	}
	if policies == 0 {
		return []string{"no NetworkPolicy"}
	}
	for _, n := range names {
		if !denied[n] {
			report("%s: no default-deny policy (podSelector, no ingress rules) selects its pods", n)
		}
	}

	// The console's pods, as a peer in the namespace names them: the one
	// peer the limiter's decision port admits beside the gateway.
	console := map[string]bool{}
	for _, n := range names {
		if pods[n].binary == "console" {
			b, _ := json.Marshal(map[string]any{"podSelector": map[string]any{"matchLabels": pods[n].labels}})
			console[string(b)] = true
		}
	}
	// Who may reach each port.
	var gateway, prometheus map[string]bool
	var consolePages []manifestPolicyPort
	expected := map[manifestPolicyPort]bool{}
	for _, n := range names {
		p := pods[n]
		metrics := p.listen
		if p.binary == "limiter" || p.binary == "console" {
			if p.ops == "" {
				report("%s: no OPS_LISTEN_ADDR, so no policy can tell the gateway's port from Prometheus's", n)
				continue
			}
			metrics = p.ops
		}
		if p.binary == "console" {
			pages := manifestPolicyPort{n, p.listen}
			expected[pages] = true
			consolePages = append(consolePages, pages)
		}
		if p.binary == "limiter" {
			dec := manifestPolicyPort{n, p.listen}
			expected[dec] = true
			gateway = maps.Clone(allowed[dec])
			maps.DeleteFunc(gateway, func(peer string, _ bool) bool { return console[peer] })
			if len(gateway) == 0 {
				report("%s: no policy admits the gateway to the decision port %s", n, p.listen)
			}
			if len(console) > 0 && !allowed[dec][slices.Collect(maps.Keys(console))[0]] {
				report("%s: no policy admits the console to the decision port %s (the admin API)", n, p.listen)
			}
			// The rate limit API is a decision port too: the same callers.
			if p.grpc != "" {
				g := manifestPolicyPort{n, p.grpc}
				expected[g] = true
				if !maps.Equal(allowed[g], gateway) {
					report("%s: the gRPC port %s admits %v, the decision port %v", n, p.grpc, slices.Sorted(maps.Keys(allowed[g])), slices.Sorted(maps.Keys(gateway)))
				}
			}
		}
		m := manifestPolicyPort{n, metrics}
		expected[m] = true
		switch {
		case len(allowed[m]) == 0:
			report("%s: no policy admits Prometheus to the metrics port %s", n, metrics)
		case prometheus == nil:
			prometheus = allowed[m]
		case !maps.Equal(prometheus, allowed[m]):
			report("%s: the metrics port %s admits %v, the other metrics ports %v", n, metrics, slices.Sorted(maps.Keys(allowed[m])), slices.Sorted(maps.Keys(prometheus)))
		}
	}
	for peer := range gateway {
		if prometheus[peer] {
			report("the limiter's decision port and the metrics ports both admit %s", peer)
		}
	}
	for _, pages := range consolePages {
		if !maps.Equal(allowed[pages], gateway) {
			report("%s: the console's pages (port %s) admit %v, the decision port's gateway %v", pages.deployment, pages.port,
				slices.Sorted(maps.Keys(allowed[pages])), slices.Sorted(maps.Keys(gateway)))
		}
	}
	for k, peers := range allowed {
		if !expected[k] && len(peers) > 0 {
			report("%s: port %s is open to %v, which serves neither decisions nor metrics", k.deployment, k.port, slices.Sorted(maps.Keys(peers)))
		}
	}
	slices.Sort(problems)
	return problems
}

func TestManifestNetworkPolicies(t *testing.T) {
	for _, p := range manifestNetworkPolicyProblems(manifestLoadKube(t)) {
		t.Error(p)
	}
}

// composeDefault is the default of a compose value "${VAR:-default}", or the
// value itself.
var composeDefault = regexp.MustCompile(`^\$\{\w+:-([^}]*)\}$`)

// The bearer tokens the deployment files ship are placeholders, and the
// limiter refuses each at start, naming the variable: compose's defaults,
// the Kubernetes Secret's values, and the token a gateway recipe sends
// (pasted into API_TOKENS unchanged, it must be refused too).
func TestManifestShippedTokensAreRefused(t *testing.T) {
	type shipped struct{ where, variable, value string }
	var tokens []shipped
	for _, s := range manifestComposeServices(manifestLoadCompose(t)) {
		if s.binary != "limiter" {
			continue
		}
		for _, v := range []string{"API_TOKENS", "ADMIN_TOKEN"} {
			raw, ok := s.env[v]
			if !ok {
				t.Errorf("compose %s: no %s", s.name, v)
				continue
			}
			if m := composeDefault.FindStringSubmatch(raw); m != nil {
				raw = m[1]
			}
			tokens = append(tokens, shipped{"compose " + s.name, v, raw})
		}
	}
	secret, ok := manifestFind(manifestLoadKube(t), "Secret", "ratewarden-secrets")
	if !ok {
		t.Fatal("no Secret ratewarden-secrets")
	}
	for _, v := range []string{"API_TOKENS", "ADMIN_TOKEN"} {
		tokens = append(tokens, shipped{"kubernetes secret.yaml", v, manifestKeys(secret)[v]})
	}
	bearer := regexp.MustCompile(`Bearer ([^"\s;]+)`)
	for _, f := range []string{"deploy/gateways/nginx/ratewarden.conf", "deploy/gateways/envoy/envoy.yaml", manifestEnvoyRLSRecipe} {
		data, err := os.ReadFile(filepath.Join(manifestRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		m := bearer.FindSubmatch(data)
		if m == nil {
			t.Errorf("%s sends no bearer token", f)
			continue
		}
		tokens = append(tokens, shipped{f, "API_TOKENS", string(m[1])})
	}
	for _, tok := range tokens {
		_, err := config.LoadLimiter(func(k string) string {
			if k == tok.variable {
				return tok.value
			}
			return ""
		})
		if err == nil || !strings.HasPrefix(err.Error(), tok.variable+": ") {
			t.Errorf("%s: the limiter accepts %s=%q (%v); ship a placeholder it refuses", tok.where, tok.variable, tok.value, err)
		}
	}
}
