// Package app_test guards the commands and the services' assemblies: they
// wire, and each step of the wiring is short enough to read at once.
package app_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// maxWiringLines bounds every function of cmd/* and internal/app/*.
const maxWiringLines = 80

// roots are the trees the bound holds in, from this directory.
var roots = []string{"../../cmd", "."}

// No function of a command or an assembly (tests aside) is longer than
// maxWiringLines: run wires steps, each a function of its own.
func TestWiringFunctionsAreShort(t *testing.T) {
	fset := token.NewFileSet()
	files := 0
	for _, root := range roots {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			files++
			file, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			for _, d := range file.Decls {
				if fn, ok := d.(*ast.FuncDecl); ok && fn.Body != nil {
					if lines := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1; lines > maxWiringLines {
						t.Errorf("%s: %s is %d lines, more than %d", path, fn.Name.Name, lines, maxWiringLines)
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// A walk from the wrong directory finds nothing and passes.
	if files < 30 {
		t.Fatalf("saw %d files under %v: too few to prove anything", files, roots)
	}
}
