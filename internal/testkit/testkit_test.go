package testkit_test

import (
	"os/exec"
	"strings"
	"testing"
)

const kit = "github.com/ratewarden/ratewarden/internal/testkit"

// No package of the services imports the test helpers: only tests (and the
// helpers themselves) do.
func TestOnlyTestsImportTheKit(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "../../...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	checked := 0
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(fields[0], kit) {
			continue
		}
		checked++
		for _, imp := range fields[1:] {
			if strings.HasPrefix(imp, kit) {
				t.Errorf("%s imports %s outside its tests", fields[0], imp)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("go list listed %d packages: the check saw too few to prove anything", checked)
	}
}
