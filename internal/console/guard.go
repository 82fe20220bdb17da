package console

import (
	"crypto/subtle"
	"net/http"
	"net/url"
	"strings"
)

// csp forbids every script, frame, plugin and foreign resource: pages are
// server-rendered, styled by the one stylesheet, charts inline SVG.
const csp = "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; " +
	"frame-ancestors 'none'; base-uri 'none'"

// securityHeaders sets the headers every answer carries.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	// same-origin, not no-referrer: under no-referrer a browser sends
	// "Origin: null" with the console's own forms, which the origin check
	// refuses.
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
}

// sameOrigin reports whether a request may change anything: a safe method
// always may (it changes nothing, and SameSite=Strict keeps the session
// cookie off cross-site navigations), an unsafe one only when the browser
// says it comes from the console's own pages (Sec-Fetch-Site) and its
// Origin, when sent, is the console's: public, the scheme and host of
// CONSOLE_PUBLIC_URL, or, when "", any scheme with the request's Host (a
// proxy must then pass the browser's Host on). The CSRF token is checked besides, by the
// handler's guard.
func sameOrigin(r *http.Request, public string) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		return false
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		u, err := url.Parse(origin)
		if err != nil || u.Host == "" {
			return false
		}
		if public != "" {
			return strings.EqualFold(u.Scheme+"://"+u.Host, public)
		}
		if !strings.EqualFold(u.Host, r.Host) {
			return false
		}
	}
	return true
}

// authed is a handler of a logged-in user's request.
type authed func(http.ResponseWriter, *http.Request, session)

// maxForm bounds a form's body.
const maxForm = 64 << 10

// member admits the request of a session whose user has role (an operator
// has a viewer's rights too): without a session, a page asks to log in; a
// user without the role gets 403; a form must carry the session's CSRF
// token.
func (s *Server) member(role Role, next authed) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ss, ok := s.session(r)
		if !ok {
			if r.Method == http.MethodGet {
				http.Redirect(w, r, "/login", http.StatusSeeOther)
				return
			}
			s.metrics.refused.WithLabelValues("no_session").Inc()
			http.Error(w, "log in first", http.StatusUnauthorized)
			return
		}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, maxForm)
			if !validToken(r.PostFormValue("csrf"), ss.csrf) {
				s.metrics.refused.WithLabelValues("csrf").Inc()
				http.Error(w, "invalid or missing CSRF token: reload the page", http.StatusForbidden)
				return
			}
		}
		if role == Operator && ss.user.Role != Operator {
			s.metrics.refused.WithLabelValues("role").Inc()
			s.cfg.Log.Warn("console action refused: not an operator", logUser(ss), logPath(r))
			s.render(w, r, http.StatusForbidden, "error", ss, errorPage{Title: "Not allowed",
				Message: "Only operators may ban, lift or extend; you are a " + string(ss.user.Role) + "."})
			return
		}
		next(w, r, ss)
	}
}

// session returns the live session of the request's cookie.
func (s *Server) session(r *http.Request) (session, bool) {
	c, err := r.Cookie(s.cookie)
	if err != nil || c.Value == "" {
		return session{}, false
	}
	return s.sessions.get(c.Value)
}

// validToken compares a submitted token with the expected one in constant
// time.
func validToken(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}
