package console

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/adminclient"
	"github.com/ratewarden/ratewarden/internal/archivequery"
)

// ban bans a subject, or extends its ban (action=extend): the admin API
// keeps a longer ban in force, and says so.
func (s *Server) ban(w http.ResponseWriter, r *http.Request, ss session) {
	action := "ban"
	if r.PostFormValue("action") == "extend" {
		action = "extend"
	}
	subj, d, reason, msg := banForm(r)
	if msg != "" {
		s.refuse(w, r, ss, action, msg)
		return
	}
	b, written, err := s.cfg.Admin.Ban(r.Context(), subj.Scope, subj.Value, d, reason, ss.user.Name)
	if err != nil {
		s.actionFailed(w, r, ss, action, err)
		return
	}
	done := map[bool]string{true: "banned", false: "kept"}[written]
	if written && action == "extend" {
		done = "extended"
	}
	s.metrics.actions.WithLabelValues("ban", map[bool]string{true: "ok", false: "kept"}[written]).Inc()
	s.cfg.Log.Info("console ban", logUser(ss), zap.String("action", action), zap.String("scope", b.Scope),
		zap.String("subject", b.Subject), zap.Duration("duration", d), zap.Bool("written", written), zap.String("ban_id", b.BanID))
	redirectToSubject(w, r, b.Scope, b.Subject, done)
}

// banForm reads and checks a ban form: the admin API checks it again.
func banForm(r *http.Request) (archivequery.Subject, time.Duration, string, string) {
	subj, err := archivequery.ParseSubject(r.PostFormValue("scope"), r.PostFormValue("subject"))
	if err != nil {
		return subj, 0, "", "Subject: " + err.Error() + "."
	}
	duration := r.PostFormValue("duration")
	if !slices.Contains(banDurations, duration) {
		return subj, 0, "", "Duration: one of " + strings.Join(banDurations, ", ") + "."
	}
	d, _ := time.ParseDuration(duration)
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	if reason == "" || len(reason) > 256 {
		return subj, 0, "", "Reason: required, at most 256 bytes: the audit trail records why."
	}
	return subj, d, reason, ""
}

// lift lifts a ban with a reason.
func (s *Server) lift(w http.ResponseWriter, r *http.Request, ss session) {
	scope, subject := r.PostFormValue("scope"), r.PostFormValue("subject")
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	switch {
	case scope != "ip" && scope != "user" || subject == "" || len(subject) > 512:
		s.refuse(w, r, ss, "lift", "Choose a ban to lift.")
		return
	case reason == "" || len(reason) > 256:
		s.refuse(w, r, ss, "lift", "Reason: required, at most 256 bytes: the audit trail records why.")
		return
	}
	if err := s.cfg.Admin.Lift(r.Context(), scope, subject, reason, ss.user.Name); err != nil {
		s.actionFailed(w, r, ss, "lift", err)
		return
	}
	s.metrics.actions.WithLabelValues("lift", "ok").Inc()
	s.cfg.Log.Info("console lift", logUser(ss), zap.String("scope", scope), zap.String("subject", subject))
	redirectToSubject(w, r, scope, subject, "lifted")
}

// refuse answers an invalid form.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, ss session, action, msg string) {
	s.metrics.actions.WithLabelValues(metricAction(action), "refused").Inc()
	s.render(w, r, http.StatusBadRequest, "error", ss, errorPage{Title: "Not done", Message: msg})
}

// actionFailed answers an action the admin API refused or could not do: its
// message on a 4xx (what was wrong), a generic one otherwise.
func (s *Server) actionFailed(w http.ResponseWriter, r *http.Request, ss session, action string, err error) {
	var apiErr *adminclient.Error
	switch {
	case errors.Is(err, adminclient.ErrNotBanned):
		s.refuse(w, r, ss, action, "No ban in force on this subject: nothing to lift.")
	case errors.As(err, &apiErr) && apiErr.Status == http.StatusBadRequest:
		s.refuse(w, r, ss, action, "The limiters refused it: "+apiErr.Message)
	default:
		s.metrics.actions.WithLabelValues(metricAction(action), "error").Inc()
		s.render(w, r, http.StatusBadGateway, "error", ss, errorPage{Title: "Not done",
			Message: s.unavailable("the limiters' admin API", err) + " Nothing may have changed: check the subject's page."})
	}
}

func metricAction(action string) string {
	if action == "lift" {
		return "lift"
	}
	return "ban"
}

func redirectToSubject(w http.ResponseWriter, r *http.Request, scope, subject, done string) {
	http.Redirect(w, r, "/subject?"+url.Values{"scope": {scope}, "value": {subject}, "done": {done}}.Encode(), http.StatusSeeOther)
}
