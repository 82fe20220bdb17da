package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
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

// rulesLabelWidth aligns the values of a rule's description; longer labels are
// followed by a single space.
const rulesLabelWidth = 10

// rulesContIndent starts the continuation lines of a value (tier overrides,
// further schedule entries) under the value column.
var rulesContIndent = strings.Repeat(" ", 2+rulesLabelWidth+1)

// writeRulesReport describes a valid rules file: the rules in evaluation
// order (Set.Rules: priority, then id), then the exemptions and the
// detection settings (defaults filled in, as the detector applies them).
func writeRulesReport(b *strings.Builder, path string, f *rules.File, set *rules.Set) {
	rs := set.Rules()
	fmt.Fprintf(b, "Checking %s\n  SUCCESS: %d %s found\n\n", path, len(rs), rulesPlural(int64(len(rs)), "rule", "rules"))
	for _, r := range rs {
		writeRule(b, r, nil)
	}
	fmt.Fprintf(b, "exempt: %s\n", describeExempt(f.Exempt))
	fmt.Fprintf(b, "detection: %s\n", describeDetection(set.Detection()))
}

// writeRLSReport describes a valid RLS directory: its descriptor rules in
// evaluation order, then its domains and the files defining them.
func writeRLSReport(b *strings.Builder, dir string, c *rlsconfig.Config, set *rules.Set) {
	rs := set.Rules()
	fmt.Fprintf(b, "Checking %s (RLS config)\n  SUCCESS: %d descriptor %s found in %d %s\n\n", dir, len(rs),
		rulesPlural(int64(len(rs)), "rule", "rules"), len(c.Files), rulesPlural(int64(len(c.Files)), "file", "files"))
	files := make(map[string]string, len(c.Domains))
	for _, d := range c.Domains {
		files[d.Name] = d.File
	}
	for _, r := range rs {
		writeRule(b, r, files)
	}
	domains := make([]string, len(c.Domains))
	for i, d := range c.Domains {
		domains[i] = fmt.Sprintf("%s (%s, %d %s)", d.Name, d.File, d.Rules, rulesPlural(int64(d.Rules), "rule", "rules"))
	}
	if len(domains) == 0 {
		domains = []string{"none"}
	}
	fmt.Fprintf(b, "domains: %s\n", strings.Join(domains, "; "))
}

// writeRule describes one compiled rule. domainFiles, when set, names the
// file of each descriptor domain.
func writeRule(b *strings.Builder, r *rules.Rule, domainFiles map[string]string) {
	mode := ""
	if r.Shadow {
		mode = ", shadow"
	}
	fmt.Fprintf(b, "%s (priority %d, %s%s)\n", r.ID, r.Priority, r.Algorithm, mode)
	if r.Shadow {
		writeField(b, "shadow:", "reports only, never denies")
	}
	if d := r.Descriptor; d != nil {
		writeDescriptor(b, r, domainFiles[d.Domain])
	} else {
		writeField(b, "matches:", describeMatch(r.Match))
		writeField(b, "key:", describeKey(r.Key))
		if slices.Contains(r.Key, "ip") {
			writeField(b, "ipv6:", describeIPv6Grouping(r.IPv6Prefix, "share the limits"))
		}
		writeField(b, "limits:", describeLimits(r.Algorithm, r.Limits))
	}
	writeTierLimits(b, rulesContIndent, r.Algorithm, r.Tiers)
	if r.Penalty != 0 {
		writeField(b, "penalty:", rulesDuration(r.Penalty.Std()))
	}
	if len(r.Schedule) > 0 {
		writeField(b, "schedule:", "while an entry is active (the first one wins), its limits and tier overrides replace the rule's")
		for _, e := range r.Schedule {
			b.WriteString(rulesContIndent + describeSchedule(r.Algorithm, e) + "\n")
			writeTierLimits(b, rulesContIndent+"  ", r.Algorithm, e.Tiers)
		}
	}
	for i, e := range r.Escalate {
		label := ""
		if i == 0 {
			label = "escalate:"
		}
		writeField(b, label, describeEscalation(e))
	}
	if d := r.Descriptor; d == nil || !d.Unlimited && !r.Blocks() { // else answered without Redis
		writeField(b, "on Redis failure:", string(r.OnRedisFailure))
	}
}

// writeDescriptor describes what a descriptor rule matches (the domain,
// from file when known, and the path) and its limits, which an unlimited
// rule and a rule of 0 requests answer without Redis.
func writeDescriptor(b *strings.Builder, r *rules.Rule, file string) {
	d := r.Descriptor
	domain := d.Domain
	if file != "" {
		domain += " (" + file + ")"
	}
	writeField(b, "domain:", domain)
	writeField(b, "path:", rules.DescriptorPath(d.Entries))
	if d.Name != "" {
		writeField(b, "name:", d.Name)
	}
	if len(d.Replaces) > 0 {
		writeField(b, "replaces:", strings.Join(d.Replaces, ", ")+" (not applied when this rule matches too)")
	}
	var flags []string
	for _, e := range d.Entries {
		if e.ShareThreshold {
			flags = append(flags, fmt.Sprintf("share_threshold on %s (the values matching %s count as one)", e.Key, e.Value))
		}
		if e.DetailedMetric {
			flags = append(flags, "detailed_metric on "+e.Key)
		}
		if e.ValueToMetric {
			flags = append(flags, "value_to_metric on "+e.Key)
		}
	}
	if len(flags) > 0 {
		writeField(b, "flags:", strings.Join(flags, "; "))
	}
	switch {
	case d.Unlimited:
		writeField(b, "limits:", "unlimited (answered OK without Redis)")
	case r.Blocks():
		writeField(b, "limits:", describeLimits(r.Algorithm, r.Limits)+" (denies every request, without Redis)")
	default:
		writeField(b, "limits:", describeLimits(r.Algorithm, r.Limits))
	}
}

// writeField writes one "label: value" line of a rule's description.
func writeField(b *strings.Builder, label, value string) {
	fmt.Fprintf(b, "  %-*s %s\n", rulesLabelWidth, label, value)
}

// writeTierLimits writes the per-tier overrides of a limit list, one line
// each, in tier order so that the output does not depend on map order.
func writeTierLimits(b *strings.Builder, indent string, alg decide.Algorithm, tiers map[string][]rules.Limit) {
	names := make([]string, 0, len(tiers))
	for t := range tiers {
		names = append(names, t)
	}
	slices.Sort(names)
	for _, t := range names {
		fmt.Fprintf(b, "%stier %s: %s\n", indent, t, describeLimits(alg, tiers[t]))
	}
}

// describeMatch says which requests a rule applies to; an empty list
// matches anything.
func describeMatch(m rules.Match) string {
	var s strings.Builder
	if len(m.Methods) == 0 {
		s.WriteString("requests of any method")
	} else {
		// Methods compare case-insensitively; the compiled rule keeps them
		// upper-cased and deduplicated, and so does the description.
		var methods []string
		for _, v := range m.Methods {
			if v = strings.ToUpper(v); !slices.Contains(methods, v) {
				methods = append(methods, v)
			}
		}
		s.WriteString(strings.Join(methods, ", ") + " requests")
	}
	if len(m.Endpoints) == 0 {
		s.WriteString(" to any endpoint")
	} else {
		s.WriteString(" to " + strings.Join(m.Endpoints, ", "))
	}
	switch len(m.Tiers) {
	case 0:
		s.WriteString("; any tier")
	case 1:
		s.WriteString("; tier " + m.Tiers[0])
	default:
		s.WriteString("; tiers " + strings.Join(m.Tiers, ", "))
	}
	return s.String()
}

// describeKey lists the key dimensions. A rule does not apply to a request
// that has no value for one of its dimensions (rules.Set.Match), which
// matters for the dimensions a request may lack: user_id, tier and
// attributes. ip, endpoint and method always have a value (the API requires
// ip and endpoint, and defaults method to GET), so they get no note.
func describeKey(key []string) string {
	var optional []string
	for _, k := range key {
		if k == "user_id" || k == "tier" || strings.HasPrefix(k, "attr:") {
			optional = append(optional, k)
		}
	}
	s := strings.Join(key, ", ")
	if len(optional) > 0 {
		s += fmt.Sprintf(" (requests without %s are not limited by this rule)", strings.Join(optional, " or "))
	}
	return s
}

// describeIPv6Grouping says how IPv6 clients are grouped at prefix length
// bits (0: the default): the addresses of one prefix are one client, whose
// requests do what.
func describeIPv6Grouping(bits int, what string) string {
	if bits == 0 {
		bits = rules.DefaultIPv6Prefix
	}
	if bits == 128 {
		return "every address on its own (no grouping)"
	}
	return fmt.Sprintf("the addresses of one /%d %s", bits, what)
}

// describeLimits renders a limit list in the terms of its algorithm:
// requests per window, or tokens per interval with a burst.
func describeLimits(alg decide.Algorithm, ls []rules.Limit) string {
	parts := make([]string, len(ls))
	for i, l := range ls {
		per := rulesDuration(l.Per.Std())
		if alg == decide.TokenBucket {
			parts[i] = fmt.Sprintf("%d %s per %s, burst %d", l.Rate, rulesPlural(l.Rate, "token", "tokens"), per, l.Burst)
		} else {
			parts[i] = fmt.Sprintf("%d per %s", l.Requests, per)
		}
	}
	return strings.Join(parts, "; ")
}

// describeSchedule renders a schedule entry: when it is active, then its
// limits and penalty. Tier overrides are written separately.
func describeSchedule(alg decide.Algorithm, e rules.ScheduleEntry) string {
	var when string
	if d := e.Daily; d != nil {
		tz := d.TZ
		if tz == "" {
			tz = "UTC" // the default zone of daily entries
		}
		when = fmt.Sprintf("daily %s-%s %s", d.From, d.To, tz)
	} else {
		when = fmt.Sprintf("from %s to %s", rulesTime(e.From.Time), rulesTime(e.To.Time))
	}
	s := when + ": " + describeLimits(alg, e.Limits)
	if e.Penalty != nil {
		s += "; penalty " + rulesDuration(e.Penalty.Std())
	}
	return s
}

// describeEscalation renders an escalation entry and the period it is
// bounded to, if any.
func describeEscalation(e rules.Escalation) string {
	s := fmt.Sprintf("after %d %s within %s, denied for %s", e.Triggers, rulesPlural(e.Triggers, "denial", "denials"),
		rulesDuration(e.Within.Std()), rulesDuration(e.Penalty.Std()))
	switch {
	case !e.From.IsZero() && !e.To.IsZero():
		s += fmt.Sprintf(" (from %s to %s)", rulesTime(e.From.Time), rulesTime(e.To.Time))
	case !e.From.IsZero():
		s += fmt.Sprintf(" (from %s)", rulesTime(e.From.Time))
	case !e.To.IsZero():
		s += fmt.Sprintf(" (until %s)", rulesTime(e.To.Time))
	}
	return s
}

// describeExempt lists what is never limited nor banned.
func describeExempt(e rules.Exempt) string {
	var parts []string
	for _, l := range []struct {
		name string
		list []string
	}{{"tiers", e.Tiers}, {"ips", e.IPs}, {"endpoints", e.Endpoints}, {"users", e.Users}} {
		if len(l.list) > 0 {
			parts = append(parts, l.name+" "+strings.Join(l.list, ", "))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

// describeDetection summarizes the abuse detector's warn, ban and scan
// policies. d has its defaults filled in, so the sections are never nil;
// the nil checks only keep a hand-built value from crashing the check.
func describeDetection(d rules.Detection) string {
	var parts []string
	if w := d.Warn; w != nil {
		parts = append(parts, fmt.Sprintf("warn after %d %s in %s", w.Violations, rulesPlural(w.Violations, "violation", "violations"), rulesDuration(w.Within.Std())))
	}
	if len(d.Ban) == 0 {
		parts = append(parts, "no violation bans")
	}
	for _, p := range d.Ban {
		parts = append(parts, fmt.Sprintf("ban %s after %d %s in %s", rulesDuration(p.Duration.Std()), p.Violations,
			rulesPlural(p.Violations, "violation", "violations"), rulesDuration(p.Within.Std())))
	}
	if s := d.Scan; s != nil {
		parts = append(parts, fmt.Sprintf("scan ban %s after %d distinct %s in %s", rulesDuration(s.Duration.Std()), s.DistinctEndpoints,
			rulesPlural(s.DistinctEndpoints, "endpoint", "endpoints"), rulesDuration(s.Within.Std())))
	}
	parts = append(parts, "IPv6 offenders: "+describeIPv6Grouping(d.IPv6Prefix, "are one offender, banned together"))
	if d.DryRun {
		parts = append(parts, "dry run (bans are published, not enforced)")
	}
	return strings.Join(parts, "; ")
}

// rulesDuration renders d as time.Duration.String does without the zero
// trailing units ("5m" rather than "5m0s", "1h" rather than "1h0m0s"), the
// way durations are usually written in the rules file. It is used for every
// duration of the report so they all read alike.
func rulesDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// rulesTime renders a schedule or escalation bound in RFC 3339, in the
// offset it was written with.
func rulesTime(t time.Time) string { return t.Format(time.RFC3339Nano) }

// rulesPlural returns one when n is 1, else many.
func rulesPlural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
