// The refusal policy: the files (the rules file and the RLS config) win
// over the dynamic rules. See the package doc.

package rulesync

import (
	"slices"

	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/rlsconfig"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// putFilesLocked puts the files f and c, just loaded by their sources, in
// force with the dynamic rules, the files winning (filesWinLocked); when
// the files' content changed, a refused dynamic version is tried again
// with them: also when the rules in force did not change, since the rule
// a refused version conflicted with may be one a dynamic override in force
// hides. It fails, keeping the files before, only when the files' rules
// alone do not compile; the source counts that refusal. It returns the
// view in force and whether the rules in force changed (see putLocked).
func (g *merger) putFilesLocked(f *fileRules, c *rlsconfig.Config) (*View, bool, error) {
	oldFile, oldRLS, prior := g.file, g.rls, g.refusal
	g.file, g.rls = f, c
	changed, err := g.filesWinLocked()
	if err != nil {
		g.file, g.rls = oldFile, oldRLS
		return nil, false, err
	}
	if changed || oldFile == nil || oldFile.hash != f.hash || rlsHash(oldRLS) != rlsHash(c) {
		g.retryLocked(prior)
	}
	return g.view.Load(), changed, nil
}

// rlsHash is the hash of the RLS config c, "" for none.
func rlsHash(c *rlsconfig.Config) string {
	if c == nil {
		return ""
	}
	return c.Hash
}

// filesWinLocked puts the files' rules held in force merged with the
// dynamic rules. When the two do not compile together the files win: the
// dynamic version is refused and the files' rules run without any dynamic
// rule, as they would after a restart. It fails, changing nothing, only
// when the files' rules alone do not compile. It reports whether the rules
// in force changed (see putLocked).
func (g *merger) filesWinLocked() (bool, error) {
	set, digest, err := g.buildLocked(g.dyn.rules)
	if err != nil && len(g.dyn.rules) > 0 {
		alone, aloneDigest, aloneErr := g.buildLocked(nil)
		if aloneErr != nil {
			return false, aloneErr
		}
		refused, atFault := g.dyn.version, g.atFaultLocked(g.dyn.rules, err)
		g.dyn = dynamicRules{}
		g.refuseLocked(refused, atFault, err)
		set, digest, err = alone, aloneDigest, nil
	}
	if err != nil {
		return false, err
	}
	return g.putLocked(set, digest), nil
}

// putDynamic puts d, a version of the dynamic rules just loaded by the
// store source, in force with the files' rules; if it was refused as
// loaded, or does not compile with them, it is refused and the dynamic
// rules in force stay.
func (g *merger) putDynamic(d *dynamicRules) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if d.err != nil {
		g.refuseLocked(d.version, d.atFault, d.err)
		g.publishRefusalLocked()
		return
	}
	set, digest, err := g.buildLocked(d.rules)
	if err != nil {
		g.refuseLocked(d.version, g.atFaultLocked(d.rules, err), err)
		g.publishRefusalLocked()
		return
	}
	g.dyn = *d
	g.refusedVersion, g.refusal = 0, nil
	if !g.putLocked(set, digest) {
		g.metrics.reload(SourceDynamic, resultUnchanged)
		g.cfg.Log.Info("dynamic rules changed, the rules in force did not; nothing applied", zap.String("version", g.view.Load().Version))
		return
	}
	g.metrics.reload(SourceDynamic, resultSuccess)
	g.cfg.Log.Info("dynamic rules applied", zap.String("version", g.view.Load().Version))
}

// wants reports whether version of the dynamic rules is worth loading: it
// is neither in force nor refused (until a change of the files clears the
// refusal).
func (g *merger) wants(version int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return version != g.dyn.version && version != g.refusedVersion
}

// retryLocked, called once changed files are in force, has the refused
// dynamic version tried again with them at once (signalling retry),
// unless applying these very files refused it (prior is the refusal before
// they were applied).
func (g *merger) retryLocked(prior *Refusal) {
	if g.refusal == nil || g.retry == nil {
		return
	}
	if g.refusal == prior { // refused with other files: try it with these
		g.refusedVersion = 0
	}
	select {
	case g.retry <- struct{}{}: // the store may also hold a newer version than the one refused
	default: // a retry is already due
	}
}

// refuseLocked counts, logs and remembers a refused version of the dynamic
// rules, atFault naming its rules at fault (called once g.dyn is the
// version that stays in force); the store source skips it until the
// version moves.
func (g *merger) refuseLocked(version int64, atFault []string, err error) {
	g.refusedVersion = version
	g.refusal = &Refusal{Version: version, Rules: atFault, Err: err, At: g.cfg.Now()}
	g.metrics.reload(SourceDynamic, resultFailure)
	g.cfg.Log.Error("dynamic rules refused", zap.Int64("version", version), zap.Strings("rules", atFault),
		zap.Int64("in_force", g.dyn.version), zap.Error(err))
}

// publishRefusalLocked shows the last refusal in the view in force, which
// keeps its rules.
func (g *merger) publishRefusalLocked() {
	if v := g.view.Load(); v != nil && v.DynamicRefused != g.refusal {
		c := *v
		c.DynamicRefused = g.refusal
		g.view.Store(&c)
	}
}

// atFaultLocked names the rules of dyn, which do not compile with the
// files' rules (err), that do not compile with them alone; when none does,
// the rules err names.
func (g *merger) atFaultLocked(dyn []dynamicRule, err error) []string {
	var ids []string
	for _, d := range dyn {
		if _, err := g.compileLocked([]dynamicRule{d}); err != nil {
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
