package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// maxWiringLines bounds the functions of the limiter's command: wiring
// only, each step short enough to read at once.
const maxWiringLines = 80

// The command's functions stay short: run wires steps, each of its own.
func TestWiringFunctionsAreShort(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			lines := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
			if lines > maxWiringLines && !strings.HasSuffix(f, "_test.go") {
				t.Errorf("%s: %s is %d lines, more than %d", f, fn.Name.Name, lines, maxWiringLines)
			}
		}
	}
}
