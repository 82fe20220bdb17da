package proctest

import (
	"bytes"
	"os"
	"os/exec"
	"runtime"
	"slices"
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

// CheckVersion runs the command name with version, -version and --version,
// and fails the test unless each prints one line naming the command, a
// revision and the Go version this binary was built with, and exits 0.
func CheckVersion(t *testing.T, name string) {
	t.Helper()
	for _, arg := range []string{"version", "-version", "--version"} {
		out := RunMain(t, name, arg)
		fields := strings.Fields(out)
		if strings.Count(out, "\n") != 1 || len(fields) < 6 || fields[0] != name || fields[2] != "revision" ||
			!slices.Contains(fields, runtime.Version()) {
			t.Errorf("%s %s = %q; want one line: %s VERSION revision REV [modified] %s GOOS/GOARCH", name, arg, out, name, runtime.Version())
		}
	}
}
