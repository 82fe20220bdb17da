package rulesync

import (
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden/internal/rules"
)

// merger holds what the sources made last: the digest of the merged rules
// in force and their view.
type merger struct {
	digest string // digestOf the rules in force
	view   atomic.Pointer[View]
}

// merged is the rules file with the RLS directory's rules added, then
// the dynamic rules applied (a dynamic rule replaces the rule of its id).
// A rule of the directory with the id of one of the file is a duplicate,
// which Compile refuses.
func (m *Manager) merged(dyn []rules.Rule) *rules.File {
	base := m.file.parsed
	if m.rls.config != nil && len(m.rls.config.Rules) > 0 {
		base = &rules.File{Rules: slices.Concat(m.file.parsed.Rules, m.rls.config.Rules), Exempt: m.file.parsed.Exempt, Detection: m.file.parsed.Detection}
	}
	return rules.Merge(base, dyn)
}

// compileLocked compiles the file and the RLS directory merged with dyn.
func (m *Manager) compileLocked(dyn []dynamicRule) (*rules.Set, error) {
	return rules.Compile(m.merged(ruleList(dyn)), m.cfg.Options)
}

// buildLocked is compileLocked, with the digest of what it compiles: when
// that is the digest of the rules in force, their set is returned as it is
// rather than compiled again.
func (m *Manager) buildLocked(dyn []dynamicRule) (*rules.Set, string, error) {
	f := m.merged(ruleList(dyn))
	digest := digestOf(f)
	if v := m.merge.view.Load(); v != nil && digest == m.merge.digest {
		return v.Set, digest, nil
	}
	set, err := rules.Compile(f, m.cfg.Options)
	return set, digest, err
}

// putLocked puts set, built from the sources held (digest is digestOf
// their rules), in force, and reports whether that changed the rules in
// force. A set of the digest in force is not applied again: the limiter
// keeps its set, and with it its leases and over-limit cache, and only the
// view moves to the sources' versions (AppliedAt stays when the set was
// applied).
func (m *Manager) putLocked(set *rules.Set, digest string) bool {
	now := m.cfg.Now()
	prev := m.merge.view.Load()
	changed := prev == nil || digest != m.merge.digest
	if changed {
		m.cfg.Apply(set)
		m.merge.digest = digest
	} else {
		now = prev.AppliedAt
	}
	view := m.viewOf(set, now)
	m.merge.view.Store(view)
	m.metrics.applied(view)
	if m.cfg.Report != nil && (prev == nil || prev.Version != view.Version) {
		m.cfg.Report(view.Version, now)
	}
	return changed
}

func (m *Manager) viewOf(set *rules.Set, now time.Time) *View {
	v := &View{DynamicVersion: m.dyn.version, File: m.cfg.File, FileHash: m.file.hash[:12], AppliedAt: now, Set: set,
		DynamicRefused: m.refusal}
	v.Version = fmt.Sprintf("%d-%s", v.DynamicVersion, v.FileHash)
	if m.rls.config != nil {
		v.RLSDir, v.RLSHash = m.cfg.RLSDir, m.rls.config.Hash[:12]
		v.Version += "-" + v.RLSHash
	}
	inFile := make(map[string]*rules.Rule, len(m.file.parsed.Rules))
	for i := range m.file.parsed.Rules {
		inFile[m.file.parsed.Rules[i].ID] = &m.file.parsed.Rules[i]
	}
	inRLS := map[string]*rules.Rule{}
	if m.rls.config != nil {
		for i := range m.rls.config.Rules {
			inRLS[m.rls.config.Rules[i].ID] = &m.rls.config.Rules[i]
		}
	}
	dyn := make(map[string]*dynamicRule, len(m.dyn.rules))
	for i := range m.dyn.rules {
		dyn[m.dyn.rules[i].rule.ID] = &m.dyn.rules[i]
	}
	for _, r := range set.Rules() {
		if d, ok := dyn[r.ID]; ok {
			v.Rules = append(v.Rules, RuleView{Rule: d.rule, Source: SourceDynamic, OverridesFile: inFile[r.ID] != nil || inRLS[r.ID] != nil,
				Version: d.stored.Version, UpdatedAt: d.stored.UpdatedAt, UpdatedBy: d.stored.UpdatedBy})
		} else if f, ok := inFile[r.ID]; ok {
			v.Rules = append(v.Rules, RuleView{Rule: *f, Source: SourceFile})
		} else {
			v.Rules = append(v.Rules, RuleView{Rule: *inRLS[r.ID], Source: SourceRLS})
		}
	}
	return v
}
