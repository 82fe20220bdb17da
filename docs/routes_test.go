package docs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// routePackages serve the HTTP routes of the limiter, the detector, the
// archiver and the console: the decision API (its paths are constants its router switches
// on), the admin API, and the ops server every service runs (health,
// readiness, metrics, profiles).
var routePackages = []string{"../internal/httpapi", "../internal/rlsapi", "../internal/adminapi", "../internal/ops", "../internal/console"}

// Every HTTP route of the services is named in docs/security.md, which says
// who may call it: in backquotes, alone or after its method (`POST /json`),
// or under a documented prefix (`/v1/admin/*`).
func TestSecurityDocNamesEveryRoute(t *testing.T) {
	raw, err := os.ReadFile("security.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	routes := servedRoutes(t)
	for _, must := range []string{"/v1/check", "/v1/admin/bans", "/readyz", "/debug/pprof/", "/bans/lift"} {
		if !slices.Contains(routes, must) {
			t.Fatalf("the route scan found no %s (found %q): it no longer understands how routes are declared", must, routes)
		}
	}
	for _, route := range routes {
		if !documented(doc, route) {
			t.Errorf("docs/security.md does not name %s: say who may call it", route)
		}
	}
}

// documented reports whether doc names route in backquotes, or a prefix of
// it followed by *.
func documented(doc, route string) bool {
	for rest := doc; ; {
		_, after, ok := strings.Cut(rest, "`")
		if !ok {
			return false
		}
		quoted, next, ok := strings.Cut(after, "`")
		if !ok {
			return false
		}
		rest = next
		if i := strings.LastIndexByte(quoted, ' '); i >= 0 {
			quoted = quoted[i+1:] // a method before the path
		}
		if quoted == route {
			return true
		}
		if prefix, ok := strings.CutSuffix(quoted, "*"); ok && strings.HasPrefix(route, prefix) {
			return true
		}
	}
}

// servedRoutes reads the route paths of routePackages' non-test files: the
// patterns given to Handle and HandleFunc (method and wildcards kept as
// written, the method dropped) and the string constants named *Path.
func servedRoutes(t *testing.T) []string {
	t.Helper()
	var routes []string
	add := func(path string) {
		if _, p, ok := strings.Cut(path, " "); ok {
			path = p
		}
		if strings.HasPrefix(path, "/") && !slices.Contains(routes, path) {
			routes = append(routes, path)
		}
	}
	for _, dir := range routePackages {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Go files in %s: %v", dir, err)
		}
		consts := map[string]string{}
		var parsed []*ast.File
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			parsed = append(parsed, f)
			ast.Inspect(f, func(n ast.Node) bool {
				spec, ok := n.(*ast.ValueSpec)
				if !ok {
					return true
				}
				for i, id := range spec.Names {
					if i < len(spec.Values) {
						if s, ok := stringValue(spec.Values[i], consts); ok {
							consts[id.Name] = s
						}
					}
				}
				return true
			})
		}
		for name, value := range consts {
			if strings.HasSuffix(name, "Path") {
				add(value)
			}
		}
		for _, f := range parsed {
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || len(call.Args) == 0 {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || (sel.Sel.Name != "Handle" && sel.Sel.Name != "HandleFunc") {
					return true
				}
				if s, ok := stringValue(call.Args[0], consts); ok {
					add(s)
				}
				return true
			})
		}
	}
	slices.Sort(routes)
	return routes
}

// stringValue evaluates a string literal, a constant of consts, or a sum of
// them.
func stringValue(e ast.Expr, consts map[string]string) (string, bool) {
	switch v := e.(type) {
	case *ast.BasicLit:
		if v.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(v.Value)
		return s, err == nil
	case *ast.Ident:
		s, ok := consts[v.Name]
		return s, ok
	case *ast.BinaryExpr:
		if v.Op != token.ADD {
			return "", false
		}
		x, okx := stringValue(v.X, consts)
		y, oky := stringValue(v.Y, consts)
		return x + y, okx && oky
	}
	return "", false
}
