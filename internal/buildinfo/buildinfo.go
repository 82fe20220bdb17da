// Package buildinfo answers the version subcommand of every command: the
// module version, the VCS revision it was built from (and whether the work
// tree had changes), and the Go version, as the go command stamped them
// into the binary (runtime/debug.ReadBuildInfo).
package buildinfo

import (
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// Requested reports whether args ask for the version: version, -version or
// --version, alone.
func Requested(args []string) bool {
	if len(args) != 1 {
		return false
	}
	switch args[0] {
	case "version", "-version", "--version":
		return true
	}
	return false
}

// Handle writes the version line of command name to w when args ask for it
// (Requested), and reports whether they did: main returns then.
func Handle(args []string, w io.Writer, name string) bool {
	if !Requested(args) {
		return false
	}
	_, _ = io.WriteString(w, Line(name)+"\n")
	return true
}

// Line is the version line of command name in this binary, e.g.
// "limiter (devel) revision 7a444c2d… modified go1.26.0 linux/amd64".
func Line(name string) string {
	info, _ := debug.ReadBuildInfo() // nil when the binary carries none
	return format(name, info, runtime.GOOS+"/"+runtime.GOARCH)
}

// format writes the version line of name from info (nil: the binary
// carries none), platform being GOOS/GOARCH.
func format(name string, info *debug.BuildInfo, platform string) string {
	version, revision, modified, goVersion := "unknown", "unknown", false, runtime.Version()
	if info != nil {
		if info.Main.Version != "" {
			version = info.Main.Version
		}
		if info.GoVersion != "" {
			goVersion = info.GoVersion
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	parts := []string{name, version, "revision", revision}
	if modified {
		parts = append(parts, "modified")
	}
	return strings.Join(append(parts, goVersion, platform), " ")
}
