package console

import (
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"
)

// loginTokenAge bounds how long a login form may be submitted.
const loginTokenAge = 15 * time.Minute

type loginPage struct {
	Token   string
	Message string
}

// loginCookie names the cookie that carries the login form's token: a
// login can no more be forged cross-site than any other form.
func (s *Server) loginCookie() string { return s.cookie + "_login" }

// setCookie sets a Secure, HttpOnly, SameSite=Strict cookie for the whole
// console; maxAge < 0 deletes it.
func (s *Server) setCookie(w http.ResponseWriter, name, value string, maxAge time.Duration) {
	c := &http.Cookie{Name: name, Value: value, Path: "/", Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode}
	switch {
	case maxAge < 0:
		c.MaxAge = -1
	case maxAge > 0:
		c.MaxAge = int(maxAge / time.Second)
	}
	http.SetCookie(w, c)
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	s.showLogin(w, r, http.StatusOK, "")
}

// showLogin renders the login form with the browser's login token, or a
// fresh one: reusing it keeps a form open in another tab valid.
func (s *Server) showLogin(w http.ResponseWriter, r *http.Request, status int, message string) {
	token := randomToken()
	if c, err := r.Cookie(s.loginCookie()); err == nil && len(c.Value) == len(token) {
		token = c.Value
	}
	s.setCookie(w, s.loginCookie(), token, loginTokenAge)
	s.render(w, r, status, "login", session{}, loginPage{Token: token, Message: message})
}

// login checks a name and password: a client address or a name that failed
// too often is refused before the password is compared, and a success
// starts a new session (a new id: a session id planted before the login is
// worth nothing).
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	c, err := r.Cookie(s.loginCookie())
	if err != nil || !validToken(r.PostFormValue("csrf"), c.Value) {
		s.metrics.refused.WithLabelValues("csrf").Inc()
		s.showLogin(w, r, http.StatusForbidden, "The form expired: log in again.")
		return
	}
	name, password := r.PostFormValue("user"), r.PostFormValue("password")
	addr := clientAddr(r)
	// No user's name is longer than maxUserName: a longer one is cut, so a
	// flood of long names cannot swell the throttle's keys nor the log.
	short := name[:min(len(name), maxUserName+1)]
	keys := []string{"addr " + addr, "user " + short}
	if !s.logins.allowed(keys...) {
		s.metrics.logins.WithLabelValues("throttled").Inc()
		s.cfg.Log.Warn("console login throttled", zap.String("client", addr), zap.String("user", short))
		s.showLogin(w, r, http.StatusTooManyRequests, "Too many failed logins: wait a minute.")
		return
	}
	user, ok := s.cfg.Users.Authenticate(name, password)
	if !ok {
		s.logins.failed(keys...)
		s.metrics.logins.WithLabelValues("refused").Inc()
		s.cfg.Log.Info("console login refused", zap.String("client", addr), zap.String("user", short))
		s.showLogin(w, r, http.StatusUnauthorized, "Wrong name or password.")
		return
	}
	ss := s.sessions.start(user)
	s.metrics.logins.WithLabelValues("ok").Inc()
	s.cfg.Log.Info("console login", zap.String("client", addr), zap.String("user", user.Name), zap.String("role", string(user.Role)))
	s.setCookie(w, s.loginCookie(), "", -1)
	s.setCookie(w, s.cookie, ss.id, 0)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request, ss session) {
	s.sessions.end(ss.id)
	s.setCookie(w, s.cookie, "", -1)
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// clientAddr is the request's peer address: the console trusts no
// forwarding header.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func logUser(ss session) zap.Field      { return zap.String("user", ss.user.Name) }
func logPath(r *http.Request) zap.Field { return zap.String("path", r.URL.Path) }
