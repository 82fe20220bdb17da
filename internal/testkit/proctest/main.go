package proctest

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// mainEnv, set to 1, has a test binary run its command's main.
const mainEnv = "RATEWARDEN_TEST_MAIN"

// RunMainOr is the TestMain of a command's tests that start the test
// binary as the command (RunMain): in such a child it runs main, else the
// tests.
func RunMainOr(m *testing.M, main func()) {
	if os.Getenv(mainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Deps returns the packages the package under test depends on (go list
// -deps), or skips the test when there is no go command.
func Deps(t *testing.T) []string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the dependencies")
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	return strings.Fields(string(out))
}

// RunMain runs the command of this test binary (see RunMainOr) with args
// and returns its stdout; it fails the test unless the command exits 0
// with nothing on stderr. name names the command in failures.
func RunMain(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), mainEnv+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || stderr.Len() > 0 {
		t.Fatalf("%s %q: %v, stderr %q", name, args, err, stderr.String())
	}
	return string(out)
}

// CheckHelp runs the command name with -h, -help and help, and fails the
// test unless each prints its usage ("Usage: name") and every one of vars,
// the names of the variables it reads, on stdout.
func CheckHelp(t *testing.T, name string, vars []string) {
	t.Helper()
	for _, arg := range []string{"-h", "-help", "help"} {
		out := RunMain(t, name, arg)
		if !strings.HasPrefix(out, "Usage: "+name) {
			t.Fatalf("%s %s does not start with its usage:\n%s", name, arg, out)
		}
		for _, v := range vars {
			if !strings.Contains(out, "\n  "+v) {
				t.Errorf("%s %s does not list %s", name, arg, v)
			}
		}
	}
}
