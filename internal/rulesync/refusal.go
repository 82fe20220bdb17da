// The refusal policy: the files (the rules file and the RLS config) win
// over the dynamic rules. See the package doc.

package rulesync

import (
	"context"
	"slices"

	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/rules"
)

// applyFilesLocked puts the files' rules, just loaded, in force merged
// with the dynamic rules. When the two do not compile together the files
// win: the dynamic version is refused and the files' rules run without any
// dynamic rule, as they would after a restart. It fails, changing nothing,
// only when the files' rules alone do not compile. It reports whether the
// rules in force changed (see putLocked).
func (m *Manager) applyFilesLocked() (bool, error) {
	set, digest, err := m.buildLocked(m.dyn.rules)
	if err != nil && len(m.dyn.rules) > 0 {
		alone, aloneDigest, aloneErr := m.buildLocked(nil)
		if aloneErr != nil {
			return false, aloneErr
		}
		refused, atFault := m.dyn.version, m.atFaultLocked(m.dyn.rules, err)
		m.dyn.rules, m.dyn.version = nil, 0
		m.refuseDynamicLocked(refused, atFault, err)
		set, digest, err = alone, aloneDigest, nil
	}
	if err != nil {
		return false, err
	}
	return m.putLocked(set, digest), nil
}

// reloadDynamicLocked loads the dynamic rules and applies them; if they do
// not load or compile the running rules stay.
func (m *Manager) reloadDynamicLocked(ctx context.Context) {
	oldDyn, oldVersion := m.dyn.rules, m.dyn.version
	if err := m.loadDynamicLocked(ctx); err != nil {
		m.publishRefusalLocked()
		return
	}
	set, digest, err := m.buildLocked(m.dyn.rules)
	if err != nil {
		refused, atFault := m.dyn.version, m.atFaultLocked(m.dyn.rules, err)
		m.dyn.rules, m.dyn.version = oldDyn, oldVersion
		m.refuseDynamicLocked(refused, atFault, err)
		m.publishRefusalLocked()
		return
	}
	m.refusedVersion, m.refusal = 0, nil
	if !m.putLocked(set, digest) {
		m.metrics.reload(SourceDynamic, resultUnchanged)
		m.cfg.Log.Info("dynamic rules changed, the rules in force did not; nothing applied", zap.String("version", m.merge.view.Load().Version))
		return
	}
	m.metrics.reload(SourceDynamic, resultSuccess)
	m.cfg.Log.Info("dynamic rules applied", zap.String("version", m.merge.view.Load().Version))
}

// retryDynamicLocked, called once changed files are in force, has the
// refused dynamic version tried again with them at once (by the refresh
// Run makes when poked), unless applying these very files refused it
// (prior is the refusal before they were applied).
func (m *Manager) retryDynamicLocked(prior *Refusal) {
	if m.refusal == nil || m.cfg.Connect == nil {
		return
	}
	if m.refusal == prior { // refused with other files: try it with these
		m.refusedVersion = 0
	}
	m.poke() // the store may also hold a newer version than the one refused
}

// refuseDynamicLocked counts, logs and remembers a refused version of the
// dynamic rules, atFault naming its rules at fault (called once
// m.dyn.version is the version that stays in force); polls skip it until
// the version moves.
func (m *Manager) refuseDynamicLocked(version int64, atFault []string, err error) {
	m.refusedVersion = version
	m.refusal = &Refusal{Version: version, Rules: atFault, Err: err, At: m.cfg.Now()}
	m.metrics.reload(SourceDynamic, resultFailure)
	m.cfg.Log.Error("dynamic rules refused", zap.Int64("version", version), zap.Strings("rules", atFault),
		zap.Int64("in_force", m.dyn.version), zap.Error(err))
}

// publishRefusalLocked shows the last refusal in the view in force, which
// keeps its rules.
func (m *Manager) publishRefusalLocked() {
	if v := m.merge.view.Load(); v != nil && v.DynamicRefused != m.refusal {
		c := *v
		c.DynamicRefused = m.refusal
		m.merge.view.Store(&c)
	}
}

// atFaultLocked names the rules of dyn, which do not compile with the
// files' rules (err), that do not compile with them alone; when none does,
// the rules err names.
func (m *Manager) atFaultLocked(dyn []dynamicRule, err error) []string {
	var ids []string
	for _, d := range dyn {
		if _, err := m.compileLocked([]dynamicRule{d}); err != nil {
			ids = append(ids, d.rule.ID)
		}
	}
	if len(ids) > 0 {
		return ids
	}
	for _, fe := range rules.FieldErrors(err) {
		if fe.RuleID != "" && !slices.Contains(ids, fe.RuleID) {
			ids = append(ids, fe.RuleID)
		}
	}
	return ids
}
