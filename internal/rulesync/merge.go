package rulesync

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden/internal/rlsconfig"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// fileRules is the rules file as a source hands it to the merger.
type fileRules struct {
	parsed *rules.File
	hash   string // SHA-256 of its content, hex
}

// dynamicRule is a dynamic rule as parsed, with its stored form (its
// version and last author, for the view).
type dynamicRule struct {
	rule   rules.Rule
	stored StoredRule
}

// dynamicRules is a version of the dynamic rules as the store source hands
// it to the merger: its rules, or, when one of them does not parse, its
// refusal (err, naming the rules atFault).
type dynamicRules struct {
	version int64
	rules   []dynamicRule
	atFault []string
	err     error
}

// merger holds the snapshot each source handed it last, puts the rules
// they make together in force (Config.Apply, Config.Report) and applies
// the refusal policy (refusal.go) when they do not compile together. It
// alone holds the lock; the sources hand it their snapshots and never
// touch what it holds.
type merger struct {
	cfg     *Config // Options, Apply, Report, Now, Log; File and RLSDir name the sources in the view
	metrics *metrics
	// retry is signalled when a refused dynamic version is to be tried
	// again; nil without a rule store.
	retry chan struct{}

	mu   sync.Mutex // serializes the puts
	file *fileRules
	rls  *rlsconfig.Config // nil without RLSDir or xDS
	dyn  dynamicRules      // in force (version 0 and no rules: none)
	// refusedVersion is a version of the dynamic rules that was refused:
	// the store source skips it until the version moves, or until a change
	// of the files clears it to try it again.
	refusedVersion int64
	refusal        *Refusal // the last refusal, until a version applies
	digest         string   // digestOf the rules in force
	view           atomic.Pointer[View]
}

// View returns the rule set in force (nil before start).
func (g *merger) View() *View { return g.view.Load() }

// dynamicVersion returns the version of the dynamic rules in force.
func (g *merger) dynamicVersion() int64 {
	if v := g.view.Load(); v != nil {
		return v.DynamicVersion
	}
	return 0
}

// start puts the sources' first snapshots in force, the files winning over
// the dynamic rules d (nil: the store did not answer). It fails, putting
// nothing in force, when the files' rules alone do not compile.
func (g *merger) start(f *fileRules, c *rlsconfig.Config, d *dynamicRules) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.file, g.rls = f, c
	if d != nil && d.err != nil {
		g.refuseLocked(d.version, d.atFault, d.err)
	} else if d != nil {
		g.dyn = *d
	}
	if _, err := g.filesWinLocked(); err != nil {
		return err
	}
	if d != nil && g.refusal == nil {
		g.metrics.reload(SourceDynamic, resultSuccess)
	}
	return nil
}

// putFile puts f in force as the rules file, as putFilesLocked does; when
// f compiles alone but not with the RLS config held, the error is a
// *conflictError.
func (g *merger) putFile(f *fileRules) (*View, bool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	v, changed, err := g.putFilesLocked(f, g.rls)
	if err != nil && g.rls != nil && g.compilesAlone(f.parsed) {
		err = &conflictError{err: err, with: SourceRLS, other: g.rls.Hash}
	}
	return v, changed, err
}

// putRLS puts c in force as the RLS config, as putFilesLocked does; when
// c compiles alone but not with the rules file held, the error is a
// *conflictError.
func (g *merger) putRLS(c *rlsconfig.Config) (*View, bool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	v, changed, err := g.putFilesLocked(g.file, c)
	if err != nil && c != nil && g.compilesAlone(&rules.File{Rules: c.Rules}) {
		err = &conflictError{err: err, with: SourceFile, other: g.file.hash}
	}
	return v, changed, err
}

// compilesAlone reports whether f compiles by itself.
func (g *merger) compilesAlone(f *rules.File) bool {
	_, err := rules.Compile(f, g.cfg.Options)
	return err == nil
}

// conflictError is the refusal of a file source's content that compiles
// by itself but not with the other file source's snapshot in force (a rule
// id both have): unlike content that fails on its own, it is worth trying
// again once the other source changes.
type conflictError struct {
	err   error
	with  string // the other source: SourceFile or SourceRLS
	other string // the hash of its snapshot the content was refused with
}

func (e *conflictError) Error() string { return e.err.Error() }

func (e *conflictError) Unwrap() error { return e.err }

// filesHash returns the hash of the snapshot of source (SourceFile or
// SourceRLS) held, "" for none.
func (g *merger) filesHash(source string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if source == SourceRLS {
		return rlsHash(g.rls)
	}
	if g.file == nil {
		return ""
	}
	return g.file.hash
}

// merged is the rules file with the RLS directory's rules added, then
// the dynamic rules applied (a dynamic rule replaces the rule of its id).
// A rule of the directory with the id of one of the file is a duplicate,
// which Compile refuses.
func (g *merger) merged(dyn []rules.Rule) *rules.File {
	base := g.file.parsed
	if g.rls != nil && len(g.rls.Rules) > 0 {
		base = &rules.File{Rules: slices.Concat(base.Rules, g.rls.Rules), Exempt: base.Exempt, Detection: base.Detection}
	}
	return rules.Merge(base, dyn)
}

// compileLocked compiles the files merged with dyn.
func (g *merger) compileLocked(dyn []dynamicRule) (*rules.Set, error) {
	return rules.Compile(g.merged(ruleList(dyn)), g.cfg.Options)
}

// buildLocked is compileLocked, with the digest of what it compiles: when
// that is the digest of the rules in force, their set is returned as it is
// rather than compiled again.
func (g *merger) buildLocked(dyn []dynamicRule) (*rules.Set, string, error) {
	f := g.merged(ruleList(dyn))
	digest := digestOf(f)
	if v := g.view.Load(); v != nil && digest == g.digest {
		return v.Set, digest, nil
	}
	set, err := rules.Compile(f, g.cfg.Options)
	return set, digest, err
}

// putLocked puts set, built from the snapshots held (digest is digestOf
// their rules), in force, and reports whether that changed the rules in
// force. A set of the digest in force is not applied again: the limiter
// keeps its set, and with it its leases and over-limit cache, and only the
// view moves to the sources' versions (AppliedAt stays when the set was
// applied).
func (g *merger) putLocked(set *rules.Set, digest string) bool {
	now := g.cfg.Now()
	prev := g.view.Load()
	changed := prev == nil || digest != g.digest
	if changed {
		g.cfg.Apply(set)
		g.digest = digest
	} else {
		now = prev.AppliedAt
	}
	view := g.viewOf(set, now)
	g.view.Store(view)
	g.metrics.applied(view)
	if g.cfg.Report != nil && (prev == nil || prev.Version != view.Version) {
		g.cfg.Report(view.Version, now)
	}
	return changed
}

func (g *merger) viewOf(set *rules.Set, now time.Time) *View {
	v := &View{DynamicVersion: g.dyn.version, File: g.cfg.File, FileHash: g.file.hash[:12], AppliedAt: now, Set: set,
		DynamicRefused: g.refusal}
	v.Version = fmt.Sprintf("%d-%s", v.DynamicVersion, v.FileHash)
	if g.rls != nil {
		v.RLSDir, v.RLSHash = g.cfg.RLSDir, g.rls.Hash[:12]
		v.Version += "-" + v.RLSHash
	}
	files := make(map[string]RuleView, len(g.file.parsed.Rules))
	for _, r := range g.file.parsed.Rules {
		files[r.ID] = RuleView{Rule: r, Source: SourceFile}
	}
	if g.rls != nil {
		for _, r := range g.rls.Rules {
			files[r.ID] = RuleView{Rule: r, Source: SourceRLS}
		}
	}
	dyn := make(map[string]*dynamicRule, len(g.dyn.rules))
	for i := range g.dyn.rules {
		dyn[g.dyn.rules[i].rule.ID] = &g.dyn.rules[i]
	}
	for _, r := range set.Rules() {
		if d, ok := dyn[r.ID]; ok {
			_, overrides := files[r.ID]
			v.Rules = append(v.Rules, RuleView{Rule: d.rule, Source: SourceDynamic, OverridesFile: overrides,
				Version: d.stored.Version, UpdatedAt: d.stored.UpdatedAt, UpdatedBy: d.stored.UpdatedBy})
		} else {
			v.Rules = append(v.Rules, files[r.ID])
		}
	}
	return v
}

// rule returns a copy of the rule id as its source has it (a dynamic rule
// in force first, then the files'), or nil.
func (g *merger) rule(dyn []dynamicRule, id string) *rules.Rule {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, _ := g.filesRuleLocked(id)
	if i := slices.IndexFunc(dyn, func(d dynamicRule) bool { return d.rule.ID == id }); i >= 0 {
		r = &dyn[i].rule
	}
	if r == nil {
		return nil
	}
	c := *r
	return &c
}

// filesSource returns the source of the files' rule id (SourceFile or
// SourceRLS), or "" when neither file has it.
func (g *merger) filesSource(id string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, source := g.filesRuleLocked(id)
	return source
}

// filesRuleLocked returns the rule id of the rules file or of the RLS
// config, or nil, and its source.
func (g *merger) filesRuleLocked(id string) (*rules.Rule, string) {
	if i := slices.IndexFunc(g.file.parsed.Rules, func(r rules.Rule) bool { return r.ID == id }); i >= 0 {
		return &g.file.parsed.Rules[i], SourceFile
	}
	if g.rls != nil {
		if i := slices.IndexFunc(g.rls.Rules, func(r rules.Rule) bool { return r.ID == id }); i >= 0 {
			return &g.rls.Rules[i], SourceRLS
		}
	}
	return nil, ""
}

// validate checks that the files' rules with the dynamic rules dyn, r
// stored among them, compile.
func (g *merger) validate(dyn []dynamicRule, r rules.Rule) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, err := rules.Compile(g.merged(append(dynamicWithout(dyn, r.ID), r)), g.cfg.Options)
	return err
}

// validateDelete checks that the files' rules with the dynamic rules dyn
// but id compile: deleting an override brings the files' rule of its id
// back, which may not run beside the other dynamic rules, and a version
// every limiter refuses must not be stored.
func (g *merger) validateDelete(dyn []dynamicRule, id string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, err := rules.Compile(g.merged(dynamicWithout(dyn, id)), g.cfg.Options); err != nil {
		if _, source := g.filesRuleLocked(id); source != "" {
			return fmt.Errorf("deleting %s puts the rule of that id of %s back in force, which does not compile with the other dynamic rules: %w",
				id, sourceName(source), err)
		}
		return err
	}
	return nil
}

// dynamicWithout returns the rules of dyn but the rule id.
func dynamicWithout(dyn []dynamicRule, id string) []rules.Rule {
	out := make([]rules.Rule, 0, len(dyn)+1)
	for _, d := range dyn {
		if d.rule.ID != id {
			out = append(out, d.rule)
		}
	}
	return out
}

// dynamicInForce returns the dynamic rules in force (not to be modified).
func (g *merger) dynamicInForce() []dynamicRule {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.dyn.rules
}

// sourceName names a files' source as an operator knows it.
func sourceName(source string) string {
	if source == SourceRLS {
		return "RLS_CONFIG_DIR"
	}
	return "the rules file"
}

func ruleList(dyn []dynamicRule) []rules.Rule {
	rs := make([]rules.Rule, len(dyn))
	for i, d := range dyn {
		rs[i] = d.rule
	}
	return rs
}
