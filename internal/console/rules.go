package console

import (
	"errors"
	"net/http"
	"strings"

	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/adminclient"
)

// maxRuleID bounds a dynamic rule's id in the form (the admin API checks it
// again).
const maxRuleID = 128

// putRule creates or replaces a dynamic rule: the admin API validates it,
// and a refusal is shown on the rules page with the fields at fault and the
// text as written.
func (s *Server) putRule(w http.ResponseWriter, r *http.Request, ss session) {
	form := &ruleForm{ID: strings.TrimSpace(r.PostFormValue("id")), Body: r.PostFormValue("rule")}
	if form.ID == "" || len(form.ID) > maxRuleID || strings.TrimSpace(form.Body) == "" {
		form.Message = "A rule needs an id and its definition (JSON, as GET /v1/admin/rules shows it)."
		s.metrics.actions.WithLabelValues("rule", "refused").Inc()
		s.renderRules(w, r, ss, http.StatusBadRequest, form)
		return
	}
	if err := s.cfg.Admin.PutRule(r.Context(), form.ID, []byte(form.Body), ss.user.Name); err != nil {
		s.ruleRefused(w, r, ss, form, err)
		return
	}
	s.metrics.actions.WithLabelValues("rule", "ok").Inc()
	s.cfg.Log.Info("console rule put", logUser(ss), zap.String("rule", form.ID))
	http.Redirect(w, r, "/rules?done=rule-saved", http.StatusSeeOther)
}

// deleteRule deletes a dynamic rule (a file's rule it overrode applies
// again).
func (s *Server) deleteRule(w http.ResponseWriter, r *http.Request, ss session) {
	form := &ruleForm{ID: strings.TrimSpace(r.PostFormValue("id"))}
	if err := s.cfg.Admin.DeleteRule(r.Context(), form.ID, ss.user.Name); err != nil {
		s.ruleRefused(w, r, ss, form, err)
		return
	}
	s.metrics.actions.WithLabelValues("rule", "ok").Inc()
	s.cfg.Log.Info("console rule deleted", logUser(ss), zap.String("rule", form.ID))
	http.Redirect(w, r, "/rules?done=rule-deleted", http.StatusSeeOther)
}

// ruleRefused shows why a rule change was not made: the admin API's own
// message and fields on a 4xx, a generic one otherwise.
func (s *Server) ruleRefused(w http.ResponseWriter, r *http.Request, ss session, form *ruleForm, err error) {
	var apiErr *adminclient.Error
	if errors.As(err, &apiErr) && apiErr.Status/100 == 4 {
		s.metrics.actions.WithLabelValues("rule", "refused").Inc()
		form.Message, form.Fields = apiErr.Message, apiErr.Fields
		s.renderRules(w, r, ss, apiErr.Status, form)
		return
	}
	s.metrics.actions.WithLabelValues("rule", "error").Inc()
	form.Message = s.unavailable("the limiters' admin API", err) + " The rule may not have changed."
	s.renderRules(w, r, ss, http.StatusBadGateway, form)
}
