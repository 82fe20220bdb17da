package buildinfo

import (
	"bytes"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestRequested(t *testing.T) {
	tests := []struct {
		args []string
		want bool
	}{
		{[]string{"version"}, true},
		{[]string{"-version"}, true},
		{[]string{"--version"}, true},
		{nil, false},
		{[]string{"version", "x"}, false},
		{[]string{"-v"}, false},
		{[]string{"help"}, false},
	}
	for _, tt := range tests {
		if got := Requested(tt.args); got != tt.want {
			t.Errorf("Requested(%q) = %v, want %v", tt.args, got, tt.want)
		}
	}
}

// The line names the module version, the revision and whether the tree
// had changes, and the Go version, from what the go command stamped.
func TestFormat(t *testing.T) {
	stamped := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/ratewarden/ratewarden", Version: "v1.4.0"},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "7a444c2d0e1f98e6a1b2c3d4e5f60718293a4b5c"},
			{Key: "vcs.time", Value: "2026-11-28T10:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		}}
	clean := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "false"}}}
	tests := []struct {
		name string
		info *debug.BuildInfo
		want string
	}{
		{"stamped, modified", stamped, "limiter v1.4.0 revision 7a444c2d0e1f98e6a1b2c3d4e5f60718293a4b5c modified go1.26.0 linux/amd64"},
		{"clean tree", clean, "limiter (devel) revision abc go1.26.0 linux/amd64"},
		{"no VCS stamp", &debug.BuildInfo{GoVersion: "go1.26.0"}, "limiter unknown revision unknown go1.26.0 linux/amd64"},
		{"no build info", nil, "limiter unknown revision unknown " + runtime.Version() + " linux/amd64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := format("limiter", tt.info, "linux/amd64"); got != tt.want {
				t.Errorf("format = %q\nwant      %q", got, tt.want)
			}
		})
	}
}

// Handle answers only a version request, with one line naming the command
// and this binary's Go version.
func TestHandle(t *testing.T) {
	var out bytes.Buffer
	if Handle([]string{"help"}, &out, "detector") || out.Len() != 0 {
		t.Fatalf("help handled as a version request: %q", out.String())
	}
	if !Handle([]string{"-version"}, &out, "detector") {
		t.Fatal("-version not handled")
	}
	line := out.String()
	if !strings.HasPrefix(line, "detector ") || !strings.HasSuffix(line, " "+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH+"\n") ||
		strings.Count(line, "\n") != 1 {
		t.Errorf("version line %q", line)
	}
}
