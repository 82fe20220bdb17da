package docs_test

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// A merge whose conflicts were committed unresolved leaves its markers in
// files no compiler reads (Markdown, YAML, shell): CHANGELOG.md and
// docs/api.md once carried both sides of a conflict. No tracked file may.
func TestNoConflictMarkers(t *testing.T) {
	out, err := exec.Command("git", "-C", "..", "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		b, err := os.ReadFile("../" + name)
		if err != nil || bytes.IndexByte(b, 0) >= 0 { // gone from the tree, or binary
			continue
		}
		for i, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "<<<<<<< ") || strings.HasPrefix(line, ">>>>>>> ") {
				t.Errorf("%s:%d: a merge conflict's marker: %q", name, i+1, line)
			}
		}
	}
}
