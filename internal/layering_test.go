// Package internal_test holds the layering of the packages: which may depend
// on which, in one table, checked by one test against what `go list -deps`
// reports (the packages each one links, test files aside).
package internal_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/ratewarden/ratewarden/"

// pure are the packages of the domain: they compute and decode, and are
// tested without a server, so they link no driver, no logger and no
// metrics library; an adapter at the edge wraps them.
var pure = []string{
	"internal/rules", "internal/decide", "internal/abuse", "internal/event", "internal/lease",
	"internal/rlsconfig", "internal/accesslog", "internal/yamlkeys", "internal/ipprefix",
	"internal/userid", "internal/evict", "internal/jsonwire", "internal/endpoint", "internal/digest",
}

// drivers are the clients of the servers, the logger and the metrics
// library.
var drivers = []string{
	"github.com/redis/go-redis", "github.com/jackc/pgx", "github.com/segmentio/kafka-go",
	"github.com/twmb/franz-go", "go.uber.org/zap", "github.com/prometheus/",
}

// adapters are the drivers, the transports and the packages that wrap
// them.
var adapters = []string{
	"github.com/redis/go-redis", "github.com/jackc/pgx", "github.com/segmentio/kafka-go", "github.com/twmb/franz-go",
	"google.golang.org/grpc", "github.com/valyala/fasthttp",
	module + "internal/redisstore", module + "internal/kafkabus", module + "internal/pgstore",
}

// layer is one rule: the packages of from (a path under the module; a
// trailing /... takes those below it too) must not depend on any package
// starting with one of forbidden, nor on a package of the module outside
// allowed when allowed is set.
type layer struct {
	name      string
	from      []string
	forbidden []string
	allowed   []string // of the module's packages, the only ones from may depend on (nil: any)
	why       string
}

var layers = []layer{
	{
		name: "pure packages link no driver", from: pure, forbidden: drivers,
		why: "the domain is computed and tested without servers; adapters sit at the edges",
	},
	{
		name: "config links no adapter and no service", from: []string{"internal/config"}, forbidden: adapters,
		// config imports accesslog (the field mapping it validates), event
		// (the scopes) and ipprefix (the lists); the rest is what those
		// import, all pure. Nothing beyond: a domain package config needs
		// next is a decision to take here, not a side effect.
		allowed: []string{
			"internal/config", "internal/accesslog", "internal/event", "internal/ipprefix",
			"internal/endpoint", "internal/jsonwire",
		},
		why: "configuration is read by every process: an adapter or a service core imported here would link into all",
	},
	{
		name: "the archiver links no Redis client", from: []string{"cmd/archiver"},
		forbidden: []string{"github.com/redis/", module + "internal/redisstore", module + "internal/redisfleet", module + "internal/redisabuse"},
		why:       "the archiver uses no Redis",
	},
	{
		name: "the archiver and devkafka link no rules engine", from: []string{"cmd/archiver", "cmd/devkafka"},
		forbidden: []string{module + "internal/rules", module + "internal/rlsconfig", "go.yaml.in/yaml"},
		why:       "neither reads rules: the rules engine and its YAML parser would only weigh on their binaries",
	},
	{
		name: "the console links no Redis, no Kafka and no decision core",
		from: []string{"cmd/console", "internal/console", "internal/adminclient", "internal/archivequery", "internal/promquery"},
		forbidden: []string{"github.com/redis/", "github.com/segmentio/kafka-go", "github.com/twmb/franz-go",
			module + "internal/redisstore", module + "internal/redisfleet", module + "internal/kafkabus", module + "internal/limiter"},
		why: "the console reads the archive (Postgres) and acts through the limiters' admin API: the enforcement path stays theirs",
	},
	{
		name: "the notifier links no Redis, no database and no rules engine", from: []string{"cmd/notifier", "internal/notifier"},
		forbidden: []string{"github.com/redis/", "github.com/jackc/pgx", module + "internal/redisstore", module + "internal/redisfleet",
			module + "internal/redisabuse", module + "internal/pgstore", module + "internal/rules", module + "internal/abuse"},
		why: "the notifier reads the bans topic and posts to webhooks: nothing else would only weigh on its binary",
	},
	{
		name: "the notifier's core reads Kafka through its own interface", from: []string{"internal/notifier"},
		forbidden: []string{module + "internal/kafkabus", "github.com/segmentio/kafka-go"},
		why:       "the assembly (internal/app/notifier) hands it kafkabus's group reader; the core is tested without a broker",
	},
	{
		name: "the detector's Redis state does not depend on the fleet's", from: []string{"internal/redisabuse"},
		forbidden: []string{module + "internal/redisfleet"},
		why:       "redisfleet asks redisabuse for the name of the detector's ban record (usesOnly below); redisabuse reaches the blacklist through an interface of its own, so no cycle",
	},
}

// usesOnly: the package from (its non-test files) uses no name of the
// package of but these.
var usesOnly = []struct {
	from, of string
	names    []string
	why      string
}{
	{
		from: "internal/redisfleet", of: "internal/redisabuse", names: []string{"Lift"},
		why: "the layout of the detector's keys is known in redisabuse alone: the fleet asks it to record a lift in them",
	},
}

// list runs go list on every package of the module: each one's
// dependencies, test files aside.
func list(t *testing.T) map[string][]string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the dependencies")
	}
	cmd := exec.Command(goTool, "list", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, "./...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		if f := strings.Fields(line); len(f) > 0 {
			pkgs[f[0]] = f[1:]
		}
	}
	if len(pkgs) < 40 {
		t.Fatalf("go list listed %d packages: too few to prove anything", len(pkgs))
	}
	return pkgs
}

// covers reports whether the pattern (a path under the module, a trailing
// /... for those below it too) names the package path.
func covers(pattern, path string) bool {
	if p, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == module+p || strings.HasPrefix(path, module+p+"/")
	}
	return path == module+pattern
}

func TestLayering(t *testing.T) {
	pkgs := list(t)
	for _, l := range layers {
		t.Run(l.name, func(t *testing.T) {
			for _, pattern := range l.from {
				matched := 0
				for path, deps := range pkgs {
					if !covers(pattern, path) {
						continue
					}
					matched++
					for _, dep := range deps {
						if slices.ContainsFunc(l.forbidden, func(f string) bool { return strings.HasPrefix(dep, f) }) {
							t.Errorf("%s depends on %s: %s", path, dep, l.why)
						}
						if l.allowed != nil && strings.HasPrefix(dep, module) &&
							!slices.ContainsFunc(l.allowed, func(a string) bool { return covers(a, dep) }) {
							t.Errorf("%s depends on %s, not in its allowed list: %s", path, dep, l.why)
						}
					}
				}
				if matched == 0 {
					t.Errorf("%s names no package: the table is out of date", pattern)
				}
			}
		})
	}

	// No package of the services links the test helpers: only tests (and
	// the helpers themselves) import them.
	const kit = module + "internal/testkit"
	for path, deps := range pkgs {
		if covers("internal/testkit/...", path) {
			continue
		}
		for _, dep := range deps {
			if dep == kit || strings.HasPrefix(dep, kit+"/") {
				t.Errorf("%s depends on %s outside its tests", path, dep)
			}
		}
	}
}

func TestUsesOnly(t *testing.T) {
	for _, u := range usesOnly {
		t.Run(u.from, func(t *testing.T) {
			files, err := filepath.Glob(filepath.Join("..", u.from, "*.go"))
			if err != nil || len(files) == 0 {
				t.Fatalf("no Go files in %s: %v", u.from, err)
			}
			imported := false
			for _, file := range files {
				if strings.HasSuffix(file, "_test.go") {
					continue
				}
				f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
				if err != nil {
					t.Fatal(err)
				}
				name := ""
				for _, imp := range f.Imports {
					if strings.Trim(imp.Path.Value, `"`) == module+u.of {
						name = filepath.Base(u.of)
						if imp.Name != nil {
							name = imp.Name.Name
						}
					}
				}
				if name == "" {
					continue
				}
				imported = true
				ast.Inspect(f, func(n ast.Node) bool {
					sel, ok := n.(*ast.SelectorExpr)
					if !ok {
						return true
					}
					if id, ok := sel.X.(*ast.Ident); ok && id.Name == name && !slices.Contains(u.names, sel.Sel.Name) {
						t.Errorf("%s uses %s.%s: %s", file, name, sel.Sel.Name, u.why)
					}
					return true
				})
			}
			if !imported {
				t.Logf("%s no longer imports %s: the rule holds trivially", u.from, u.of)
			}
		})
	}
}
