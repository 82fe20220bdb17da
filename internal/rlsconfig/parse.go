package rlsconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// fileYAML is one configuration file.
type fileYAML struct {
	Domain      string           `yaml:"domain"`
	Descriptors []descriptorYAML `yaml:"descriptors"`
	Other       otherKeys        `yaml:",inline"`
}

// descriptorYAML is one descriptor of the tree.
type descriptorYAML struct {
	Key       string         `yaml:"key"`
	Value     string         `yaml:"value"`
	RateLimit *rateLimitYAML `yaml:"rate_limit"`
	// ShadowMode decides and counts but never denies (rules.Rule.Shadow).
	ShadowMode bool `yaml:"shadow_mode"`
	// The flags of this level (rules.DescriptorEntry): they apply to the
	// rate limits of this descriptor and of the ones nested in it.
	DetailedMetric bool             `yaml:"detailed_metric"`
	ValueToMetric  bool             `yaml:"value_to_metric"`
	ShareThreshold bool             `yaml:"share_threshold"`
	Descriptors    []descriptorYAML `yaml:"descriptors"`
	// QuotaMode and Metadata are read and not applied (see Warning).
	QuotaMode yaml.Node `yaml:"quota_mode"`
	Metadata  yaml.Node `yaml:"metadata"`
	Other     otherKeys `yaml:",inline"`
}

// rateLimitYAML is a rate_limit block. Pointers tell a field left out from
// one written as 0.
type rateLimitYAML struct {
	Name            string        `yaml:"name"`
	Replaces        []replaceYAML `yaml:"replaces"`
	Unit            *string       `yaml:"unit"`
	RequestsPerUnit *uint32       `yaml:"requests_per_unit"`
	UnitMultiplier  *uint32       `yaml:"unit_multiplier"`
	Unlimited       bool          `yaml:"unlimited"`

	// Extension, in the terms of the rules file.
	Algorithm      decide.Algorithm      `yaml:"algorithm"`
	Burst          *int64                `yaml:"burst"`
	Penalty        rules.Duration        `yaml:"penalty"`
	OnRedisFailure rules.FailurePolicy   `yaml:"on_redis_failure"`
	Schedule       []rules.ScheduleEntry `yaml:"schedule"`
	Escalate       []rules.Escalation    `yaml:"escalate"`
	Limits         []rules.Limit         `yaml:"limits"`
	IPv6Prefix     int                   `yaml:"ipv6_prefix"`
	Debit          rules.DebitPolicy     `yaml:"debit"`
	// Reserve and ReserveHold: the request-time call (hits_addend 0) takes
	// an estimate that the stream-done call naming its id settles.
	Reserve     int64          `yaml:"reserve"`
	ReserveHold rules.Duration `yaml:"reserve_hold"`
	// Lease is written as in the rules file: true, false or {max_units: n}.
	Lease *rules.Lease `yaml:"lease"`
	// Release is a concurrency rule's: which stream-done calls release.
	Release rules.HoldRelease `yaml:"release"`

	Other otherKeys `yaml:",inline"`
}

type replaceYAML struct {
	Name  string    `yaml:"name"`
	Other otherKeys `yaml:",inline"`
}

// units are the units of envoyproxy/ratelimit, lower-case (it accepts any
// case). A month is 30 days and a year 365, as there.
var units = map[string]time.Duration{
	"second": time.Second,
	"minute": time.Minute,
	"hour":   time.Hour,
	"day":    24 * time.Hour,
	"week":   7 * 24 * time.Hour,
	"month":  30 * 24 * time.Hour,
	"year":   365 * 24 * time.Hour,
}

const unitNames = "second, minute, hour, day, week, month or year"

// parsedFile is one file's domain and its rules (without ids yet).
type parsedFile struct {
	name     string
	rules    []*node
	warnings []Warning
	// faulty: the file has problems (reported), so its rules are not used.
	faulty bool
}

// node is a rule made from one descriptor, and where it comes from.
type node struct {
	file string
	rule rules.Rule
	// limitsForm: the rate_limit wrote limits (the rules-file form) rather
	// than unit and requests_per_unit.
	limitsForm bool
}

func (n *node) errorf(field, format string, args ...any) *Error {
	return &Error{File: n.file, Domain: n.rule.Descriptor.Domain, Path: shownPath(n.rule.Descriptor.Entries), Field: field,
		Reason: fmt.Sprintf(format, args...)}
}

// parseFile decodes one file strictly (unknown keys are errors; keys of
// envoyproxy/ratelimit out of place are warnings, see erlKeys) and
// converts its descriptors. It returns the domain whenever the file has a
// valid one (else nil), and reports every problem found to l.
func (l *loader) parseFile(name string, data []byte) *parsedFile {
	fileErr := func(format string, args ...any) *parsedFile {
		l.problems.add(&Error{File: name, Reason: fmt.Sprintf(format, args...)})
		return nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f fileYAML
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return fileErr("empty file (a configuration file needs a domain)")
		}
		l.problems.add(decodeErrors(name, data, err)...)
		return nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			l.problems.add(decodeErrors(name, data, err)...)
			return nil
		}
		return fileErr("line %d: a configuration file holds one YAML document", extra.Line)
	}
	return l.convert(name, f.Domain, f.Descriptors, f.Other)
}

// convert validates and converts the configuration named name, of domain
// and descriptors ds, the keys other beside them: a file, decoded, or a
// Document. It returns the domain whenever it is valid (else nil), and
// reports every problem found to l.
func (l *loader) convert(name, domain string, ds []descriptorYAML, other otherKeys) *parsedFile {
	if why := validDomain(domain); why != "" {
		l.problems.add(&Error{File: name, Field: "domain", Reason: why})
		return nil
	}
	w := &walker{l: l, file: name, domain: domain}
	w.others(nil, "", other, notInFile, fileKeys)
	pf := &parsedFile{name: domain, rules: w.level(nil, ds)}
	pf.warnings, pf.faulty = w.warnings, w.faults > 0
	return pf
}

// validDomain returns why d is not a valid domain, or "".
func validDomain(d string) string {
	switch {
	case d == "":
		return "required (envoyproxy/ratelimit: a configuration file cannot have an empty domain)"
	case len(d) > rules.MaxDomain:
		return fmt.Sprintf("at most %d bytes", rules.MaxDomain)
	case badText(d):
		return fmt.Sprintf("%q must be valid UTF-8 without control characters", truncate(d, 80))
	}
	return ""
}

// badText reports whether s has a control character or invalid UTF-8, which
// descriptor rules refuse.
func badText(s string) bool {
	return strings.ContainsFunc(s, func(c rune) bool { return c < 0x20 || c == 0x7f || c == 0xFFFD })
}

// maxShownPath bounds the descriptor path an error or a warning shows: a
// path of 8 levels of the longest keys and values is 10 KiB.
const maxShownPath = 512

// shownPath is the path of entries as errors and warnings show it.
func shownPath(entries []rules.DescriptorEntry) string {
	return showPath(rules.DescriptorPath(entries))
}

// showPath is a descriptor path as errors and warnings show it: at most
// maxShownPath bytes, quoted when it holds a character that is not
// printable. Those of a key or value are refused, and the error saying so
// reaches terminals (rules check) and logs: escaped, not as they are.
func showPath(p string) string {
	p = truncate(p, maxShownPath)
	if !utf8.ValidString(p) || strings.ContainsFunc(p, func(r rune) bool { return !strconv.IsPrint(r) }) {
		return strconv.Quote(p)
	}
	return p
}

// truncate cuts s to at most n bytes, never inside a character (an error
// of invalid UTF-8 cannot be sent back to an xDS server), and marks the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// walker converts the descriptor tree of one file.
type walker struct {
	l            *loader
	file, domain string
	warnings     []Warning
	faults       int // problems of this file
}

// errorf reports a problem of the descriptor at entries. Its path is only
// written out for a problem reported in full (see problems).
func (w *walker) errorf(entries []rules.DescriptorEntry, field, format string, args ...any) {
	w.faults++
	if w.l.problems.full() {
		w.l.problems.more++
		return
	}
	w.l.problems.add(&Error{File: w.file, Domain: w.domain, Path: shownPath(entries), Field: field,
		Reason: fmt.Sprintf(format, args...)})
}

// level converts the descriptors of one level, below the entries parent,
// and returns their rules in tree order.
func (w *walker) level(parent []rules.DescriptorEntry, ds []descriptorYAML) []*node {
	if w.l.budget < len(ds) {
		if w.l.budget >= 0 { // reported once
			w.errorf(parent, "descriptors", "more than %d descriptors in the configuration (every file together)", MaxDescriptors)
		}
		w.l.budget = -1
		return nil
	}
	w.l.budget -= len(ds)
	subs := make([][]*node, len(ds))
	entries := make([]rules.DescriptorEntry, len(ds))
	ok := make([]bool, len(ds))
	first := make(map[[2]string]int, len(ds)) // the index of each key and value at this level
	for i := range ds {
		d := &ds[i]
		e := rules.DescriptorEntry{Key: d.Key, Value: d.Value, ShareThreshold: d.ShareThreshold,
			DetailedMetric: d.DetailedMetric, ValueToMetric: d.ValueToMetric}
		entries[i] = e
		if d.Key == "" {
			w.errorf(parent, fmt.Sprintf("descriptors[%d].key", i), "required (envoyproxy/ratelimit: descriptor has empty key)")
			continue
		}
		at := append(parent[:len(parent):len(parent)], e)
		if j, dup := first[[2]string{d.Key, d.Value}]; dup {
			w.errorf(at, "", "duplicate descriptor composite key (also descriptors[%d] of this level)", j)
			continue
		}
		first[[2]string{d.Key, d.Value}] = i
		ok[i] = true
		w.others(at, "", d.Other, notInDescriptor, descriptorKeys)
		if q := &d.QuotaMode; q.Kind != 0 {
			var b bool
			if err := q.Decode(&b); err != nil {
				w.errorf(at, "quota_mode", "line %d: want true or false", q.Line)
			} else if b {
				w.warnf(at, q.Line, "quota_mode", "not applied: answered as without it")
			}
		}
		if d.Metadata.Kind != 0 { // its content is free, as there
			w.warnf(at, d.Metadata.Line, "metadata", "not used: no response dynamic metadata is sent")
		}
		subs[i] = w.descriptor(at, d)
	}
	// A descriptor without rate_limit whose nested descriptors define no
	// rate limit either is "effectively whitelisted" (envoyproxy/ratelimit):
	// a request that reaches it is not limited. It makes no rule, unless a
	// less specific descriptor of the same level (the key alone, or a
	// shorter wildcard) would then match the request in its place: there
	// an unlimited rule keeps it whitelisted, as the descriptor tree of
	// package rules only has the nodes its rules make.
	produces := make([]bool, len(ds))
	for i := range subs {
		produces[i] = len(subs[i]) > 0
	}
	var rivals *levelRivals
	var out []*node
	for i := range ds {
		if ok[i] && !produces[i] && ds[i].RateLimit == nil && entries[i].Value != "" {
			if rivals == nil {
				rivals = rivalsOf(entries, produces)
			}
			if rivals.shadow(entries[i]) {
				e := append(parent[:len(parent):len(parent)], entries[i])
				subs[i] = []*node{w.newNode(e, rules.Rule{
					Algorithm:  decide.FixedWindow,
					Shadow:     ds[i].ShadowMode,
					Descriptor: &rules.DescriptorMatch{Unlimited: true},
				})}
			}
		}
		out = append(out, subs[i]...)
	}
	return out
}

// levelRivals are the entries of one level that make rules and could take
// a request in the place of a more specific entry: the keys written alone,
// and the wildcards of each key.
type levelRivals struct {
	alone     map[string]bool
	wildcards map[string][]string
	index     map[string]*rules.Wildcards // built as needed
}

func rivalsOf(entries []rules.DescriptorEntry, produces []bool) *levelRivals {
	r := &levelRivals{alone: map[string]bool{}, wildcards: map[string][]string{}, index: map[string]*rules.Wildcards{}}
	for i, e := range entries {
		switch {
		case !produces[i]:
		case e.Value == "":
			r.alone[e.Key] = true
		case e.IsWildcard():
			r.wildcards[e.Key] = append(r.wildcards[e.Key], e.Value)
		}
	}
	return r
}

// shadow reports whether e, an entry with a value that makes no rule,
// could leave a request to another entry of its level that makes rules:
// the same key alone, or a wildcard that matches the value; for a wildcard
// entry, any wildcard of the key (whether two wildcards overlap is not
// worked out: a rule too many only keeps the whitelisting
// envoyproxy/ratelimit has there).
func (r *levelRivals) shadow(e rules.DescriptorEntry) bool {
	wildcards := r.wildcards[e.Key]
	switch {
	case r.alone[e.Key]:
		return true
	case len(wildcards) == 0:
		return false
	case e.IsWildcard():
		return true
	}
	index := r.index[e.Key]
	if index == nil {
		index = rules.NewWildcards(wildcards)
		r.index[e.Key] = index
	}
	_, ok := index.Match(e.Value)
	return ok
}

// descriptor converts descriptor d at entries and the descriptors nested in
// it, and returns their rules in tree order.
func (w *walker) descriptor(entries []rules.DescriptorEntry, d *descriptorYAML) []*node {
	depth := len(entries)
	e := entries[depth-1]
	switch {
	case len(e.Key) > rules.MaxDescriptorKey:
		w.errorf(entries, "key", "at most %d bytes", rules.MaxDescriptorKey)
	case badText(e.Key):
		w.errorf(entries, "key", "must be valid UTF-8 without control characters")
	}
	switch {
	case len(e.Value) > rules.MaxDescriptorValue:
		w.errorf(entries, "value", "at most %d bytes", rules.MaxDescriptorValue)
	case badText(e.Value):
		w.errorf(entries, "value", "must be valid UTF-8 without control characters")
	}
	if e.ShareThreshold && !e.IsWildcard() {
		w.errorf(entries, "share_threshold", "needs a wildcard value (with *)")
	}
	var out []*node
	if d.RateLimit != nil {
		if n := w.rateLimit(entries, d); n != nil {
			out = append(out, n)
		}
	}
	if len(d.Descriptors) > 0 {
		if depth >= rules.MaxEntries {
			w.errorf(entries, "descriptors", "nested deeper than %d levels", rules.MaxEntries)
		} else {
			out = append(out, w.level(entries, d.Descriptors)...)
		}
	}
	return out
}

// rateLimit converts the rate_limit of descriptor d, or reports why it
// cannot and returns nil. Problems only rules validation finds (bounds of
// the extension's fields) are left to it: Load reports them with the
// descriptor's path.
func (w *walker) rateLimit(entries []rules.DescriptorEntry, d *descriptorYAML) *node {
	rl := d.RateLimit
	faults := w.faults
	fail := func(field, format string, args ...any) { w.errorf(entries, field, format, args...) }
	known := w.others(entries, "rate_limit.", rl.Other, notInRateLimit, rateLimitKeys)
	var replaces []string
	for i, r := range rl.Replaces {
		known = w.others(entries, fmt.Sprintf("rate_limit.replaces[%d].", i), r.Other, notInReplaces, replaceKeys) && known
		switch {
		case r.Name == "":
			fail(fmt.Sprintf("rate_limit.replaces[%d].name", i), "required (the name of the rate limit replaced)")
		case r.Name == rl.Name:
			fail(fmt.Sprintf("rate_limit.replaces[%d].name", i), "%q is this rate limit's own name", truncate(r.Name, 80))
		}
		replaces = append(replaces, r.Name)
	}
	if !known { // the rest would only add noise to the unknown key
		return nil
	}
	r := rules.Rule{
		Algorithm:      rl.Algorithm,
		Penalty:        rl.Penalty,
		Shadow:         d.ShadowMode,
		OnRedisFailure: rl.OnRedisFailure,
		Schedule:       rl.Schedule,
		Escalate:       rl.Escalate,
		IPv6Prefix:     rl.IPv6Prefix,
		Debit:          rl.Debit,
		Reserve:        rl.Reserve,
		ReserveHold:    rl.ReserveHold,
		Lease:          rl.Lease,
		Descriptor:     &rules.DescriptorMatch{Name: rl.Name, Replaces: replaces, Unlimited: rl.Unlimited, Release: rl.Release},
	}
	if !r.Lease.Enabled() { // lease: false
		r.Lease = nil
	}
	if r.Algorithm == "" {
		r.Algorithm = decide.FixedWindow
	}
	if r.OnRedisFailure == "" {
		r.OnRedisFailure = rules.FailLocal
	}
	switch {
	case rl.Unlimited:
		if rl.Unit != nil || rl.RequestsPerUnit != nil {
			fail("rate_limit", "should not have unit/requests_per_unit with unlimited")
		}
		if extra := rl.present(false); len(extra) > 0 {
			fail("rate_limit.unlimited", "not allowed with %s", strings.Join(extra, ", "))
		}
	case len(rl.Limits) > 0:
		if extra := rl.present(true); len(extra) > 0 {
			fail("rate_limit.limits", "not allowed with %s (limits replaces them)", strings.Join(extra, ", "))
		}
		r.Limits = rl.Limits
	case r.Algorithm == decide.Concurrency:
		fail("rate_limit", "algorithm concurrency takes limits: [{concurrent: N, hold: D}] "+
			"(N requests in flight, each hold lapsing D after it was taken), not unit and requests_per_unit")
	default:
		r.Limits = w.limit(rl, r.Algorithm, fail)
	}
	if w.faults > faults {
		return nil
	}
	n := w.newNode(entries, r)
	n.limitsForm = len(rl.Limits) > 0
	return n
}

// present lists the fields of rl that an unlimited rate limit (limits
// false), or one writing limits (limits true), must not have.
func (rl *rateLimitYAML) present(limits bool) []string {
	var out []string
	add := func(set bool, name string) {
		if set {
			out = append(out, name)
		}
	}
	if limits {
		add(rl.Unit != nil, "unit")
		add(rl.RequestsPerUnit != nil, "requests_per_unit")
	}
	add(rl.UnitMultiplier != nil, "unit_multiplier")
	add(rl.Burst != nil, "burst")
	if !limits {
		add(rl.Algorithm != "", "algorithm")
		add(len(rl.Limits) > 0, "limits")
		add(rl.Penalty != 0, "penalty")
		add(rl.OnRedisFailure != "", "on_redis_failure")
		add(len(rl.Schedule) > 0, "schedule")
		add(len(rl.Escalate) > 0, "escalate")
		add(rl.IPv6Prefix != 0, "ipv6_prefix")
		add(rl.Debit != "", "debit")
		add(rl.Reserve != 0, "reserve")
		add(rl.ReserveHold != 0, "reserve_hold")
		add(rl.Lease.Enabled(), "lease")
		add(rl.Release != "", "release")
	}
	return out
}

// limit converts unit, unit_multiplier, requests_per_unit and burst into
// the rate limit's one limit, or reports why it cannot.
func (w *walker) limit(rl *rateLimitYAML, alg decide.Algorithm, fail func(field, format string, args ...any)) []rules.Limit {
	var per time.Duration
	switch {
	case rl.Unit == nil || *rl.Unit == "":
		fail("rate_limit", "missing unit (want %s)", unitNames)
	default:
		if per = units[strings.ToLower(*rl.Unit)]; per == 0 {
			fail("rate_limit", "unknown unit %q (want %s)", truncate(*rl.Unit, 40), unitNames)
		}
	}
	if m := rl.UnitMultiplier; m != nil {
		switch {
		case *m == 0:
			fail("rate_limit.unit_multiplier", "must be at least 1")
		case per > 0 && int64(*m) > math.MaxInt64/int64(per):
			fail("rate_limit.unit_multiplier", "%d %ss is too long a window", *m, strings.ToLower(*rl.Unit))
		default:
			per *= time.Duration(*m)
		}
	}
	if rl.RequestsPerUnit == nil {
		fail("rate_limit", "missing requests_per_unit (0 denies every request)")
		return nil
	}
	rpu := int64(*rl.RequestsPerUnit)
	if alg != decide.TokenBucket {
		if rl.Burst != nil {
			fail("rate_limit.burst", "only with algorithm token_bucket (the bucket's capacity)")
		}
		return []rules.Limit{{Requests: rpu, Per: rules.Duration(per)}}
	}
	if rpu == 0 {
		fail("rate_limit.requests_per_unit", "0 (deny every request) needs a window algorithm, not token_bucket")
	}
	if rl.Burst == nil {
		fail("rate_limit.burst", "required with algorithm token_bucket (the bucket's capacity; requests_per_unit tokens refill every unit)")
		return nil
	}
	return []rules.Limit{{Rate: rpu, Burst: *rl.Burst, Per: rules.Duration(per)}}
}

// newNode makes the node of rule r at entries: r gets its domain, path
// and priority (its id comes later, from every rule of the directory).
func (w *walker) newNode(entries []rules.DescriptorEntry, r rules.Rule) *node {
	r.Priority = Priority
	r.Descriptor.Domain = w.domain
	r.Descriptor.Entries = entries
	return &node{file: w.file, rule: r}
}
