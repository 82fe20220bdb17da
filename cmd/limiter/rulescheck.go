package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/ratewarden/ratewarden/internal/rlsconfig"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// rulesUsage is printed by "limiter rules -h" and after every usage error.
const rulesUsage = `usage: limiter rules check [--rls-dir DIR]... [FILE...]

Check validates each rules file as the limiter would load it (strict YAML,
every rule and setting validated, then compiled) and prints the rules it
defines, in evaluation order. Every file is checked, even after a failure.

--rls-dir DIR (or --rls-dir=DIR, as often as needed) checks a directory of
envoyproxy/ratelimit configuration files as the limiter loads
RLS_CONFIG_DIR: its *.yaml and *.yml files (dotfiles and subdirectories
ignored), one domain per file, every descriptor converted and compiled.
It prints the descriptor rules they define (domain, path, limit and
flags), then the domains. Rules files and directories are checked each on
its own, in the order given.

Exit status: 0 if everything checked is valid, 1 if any file or directory
is invalid or cannot be read, 2 on a usage error.
`

// Exit statuses of rulesCommand, as promtool check uses them so that CI
// scripts can tell a bad rules file from a bad invocation.
const (
	rulesExitOK      = 0
	rulesExitInvalid = 1
	rulesExitUsage   = 2
)

// rulesCommand runs "limiter rules <subcommand> ..." and returns the exit status.
func rulesCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return rulesUsageError(stderr, "no subcommand given")
	}
	switch args[0] {
	case "check":
		return rulesCheck(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		_, _ = io.WriteString(stdout, rulesUsage)
		return rulesExitOK
	}
	return rulesUsageError(stderr, fmt.Sprintf("unknown subcommand %q", args[0]))
}

// rulesUsageError reports a usage error with the usage text, on stderr so
// that it is not mistaken for check output.
func rulesUsageError(stderr io.Writer, msg string) int {
	fmt.Fprintf(stderr, "limiter rules: %s\n%s", msg, rulesUsage)
	return rulesExitUsage
}

// checkTarget is one thing to check: a rules file, or an RLS directory.
type checkTarget struct {
	path string
	dir  bool
}

// rulesCheck runs "limiter rules check [--rls-dir DIR]... [FILE...]".
// Arguments are parsed by hand rather than with package flag so that a
// help flag after a file name still prints the usage; "--" ends the flags
// for files named like one.
func rulesCheck(args []string, stdout, stderr io.Writer) int {
	var targets []checkTarget
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			for _, f := range args[i+1:] {
				targets = append(targets, checkTarget{path: f})
			}
			break
		}
		switch {
		case a == "-h" || a == "-help" || a == "--help":
			_, _ = io.WriteString(stdout, rulesUsage)
			return rulesExitOK
		case a == "--rls-dir" || a == "-rls-dir":
			if i+1 == len(args) || args[i+1] == "" {
				return rulesUsageError(stderr, "check: --rls-dir needs a directory")
			}
			i++
			targets = append(targets, checkTarget{path: args[i], dir: true})
			continue
		case strings.HasPrefix(a, "--rls-dir=") || strings.HasPrefix(a, "-rls-dir="):
			_, dir, _ := strings.Cut(a, "=")
			if dir == "" {
				return rulesUsageError(stderr, "check: --rls-dir needs a directory")
			}
			targets = append(targets, checkTarget{path: dir, dir: true})
			continue
		case len(a) > 1 && a[0] == '-':
			return rulesUsageError(stderr, fmt.Sprintf("check: unknown flag %q", a))
		}
		targets = append(targets, checkTarget{path: a})
	}
	if len(targets) == 0 {
		return rulesUsageError(stderr, "check: no file or --rls-dir given")
	}
	status := rulesExitOK
	wrote := false // separates the reports of successive valid files
	for _, t := range targets {
		path := t.path
		report, err := t.check()
		if err != nil {
			status = rulesExitInvalid
			var b strings.Builder
			fmt.Fprintf(&b, "%s: FAILED\n", path)
			for _, line := range checkErrorLines(path, err) {
				fmt.Fprintf(&b, "  %s\n", line)
			}
			_, _ = io.WriteString(stderr, b.String())
			continue
		}
		var b strings.Builder
		if wrote {
			b.WriteByte('\n')
		}
		report(&b)
		_, _ = io.WriteString(stdout, b.String())
		wrote = true
	}
	return status
}

// check loads the target as the limiter does and returns the writer of its
// report.
func (t checkTarget) check() (func(*strings.Builder), error) {
	if t.dir {
		c, set, err := loadRLSForCheck(t.path)
		if err != nil {
			return nil, err
		}
		return func(b *strings.Builder) { writeRLSReport(b, t.path, c, set) }, nil
	}
	f, set, err := loadRulesForCheck(t.path)
	if err != nil {
		return nil, err
	}
	return func(b *strings.Builder) { writeRulesReport(b, t.path, f, set) }, nil
}

// loadRulesForCheck loads and compiles path exactly as the limiter does at
// start (LoadFile then Compile with the default options), so that a file
// that passes the check also loads in production. The File is returned too
// because the compiled Set does not expose the exemptions.
func loadRulesForCheck(path string) (*rules.File, *rules.Set, error) {
	f, err := rules.LoadFile(path)
	if err != nil {
		return nil, nil, err
	}
	set, err := rules.Compile(f, rules.Options{})
	if err != nil {
		return nil, nil, err
	}
	return f, set, nil
}

// loadRLSForCheck loads an RLS directory exactly as the limiter does at
// start (rlsconfig.LoadDir, then Compile with the default options).
func loadRLSForCheck(dir string) (*rlsconfig.Config, *rules.Set, error) {
	c, err := rlsconfig.LoadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	set, err := rules.Compile(&rules.File{Rules: c.Rules}, rules.Options{})
	if err != nil {
		return nil, nil, err
	}
	return c, set, nil
}

// checkErrorLines splits err (problems are joined one per line) into the
// lines to print under "FILE: FAILED", without the "FILE: " prefix that
// LoadFile adds, since the header names the file.
func checkErrorLines(path string, err error) []string {
	var lines []string
	for line := range strings.SplitSeq(strings.TrimPrefix(err.Error(), path+": "), "\n") {
		if strings.TrimSpace(line) != "" {
			lines = append(lines, line)
		}
	}
	return lines
}
