package console

import (
	"net/http"
	"net/netip"
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

// login checks a name and password: a client network, or a name from that
// network, that failed too often is refused before the password is
// compared (a streak from one network never refuses the right password
// from another), as is a login while too many others are being compared;
// a success starts a new session (a new id: a session id planted before
// the login is worth nothing), unless the user logged in too often.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	c, err := r.Cookie(s.loginCookie())
	if err != nil || !validToken(r.PostFormValue("csrf"), c.Value) {
		s.metrics.refused.WithLabelValues("csrf").Inc()
		s.showLogin(w, r, http.StatusForbidden, "The form expired: log in again.")
		return
	}
	name, password := r.PostFormValue("user"), r.PostFormValue("password")
	client := s.cfg.Clients.Of(r)
	addr, network := client.String(), clientNetwork(client)
	// No user's name is longer than maxUserName: a longer one is cut, so a
	// flood of long names cannot swell the throttle's keys nor the log.
	short := name[:min(len(name), maxUserName+1)]
	keys := []string{"net " + network, "user " + network + " " + short}
	if !s.logins.allowed(keys...) {
		s.metrics.logins.WithLabelValues("throttled").Inc()
		s.cfg.Log.Warn("console login throttled", zap.String("client", addr), zap.String("user", short))
		s.showLogin(w, r, http.StatusTooManyRequests, "Too many failed logins: wait a minute.")
		return
	}
	if !s.hashing.enter(r.Context()) {
		s.metrics.logins.WithLabelValues("busy").Inc()
		s.cfg.Log.Warn("console login refused: too many logins at once", zap.String("client", addr), zap.String("user", short))
		s.showLogin(w, r, http.StatusServiceUnavailable, "The console is checking too many logins at once: try again in a moment.")
		return
	}
	user, ok := s.cfg.Users.Authenticate(name, password)
	s.hashing.leave()
	if !ok {
		s.logins.record(keys...)
		s.metrics.logins.WithLabelValues("refused").Inc()
		s.cfg.Log.Info("console login refused", zap.String("client", addr), zap.String("user", short))
		s.showLogin(w, r, http.StatusUnauthorized, "Wrong name or password.")
		return
	}
	if !s.starts.allowed(user.Name) {
		s.metrics.logins.WithLabelValues("throttled").Inc()
		s.cfg.Log.Warn("console login throttled: too many sessions started", zap.String("client", addr), zap.String("user", user.Name))
		s.showLogin(w, r, http.StatusTooManyRequests, "Too many logins for this user: wait a minute.")
		return
	}
	s.starts.record(user.Name)
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

// clientNetwork is the network logins are throttled by: the client's IPv4
// /24 or IPv6 /64 (one host holds a whole /64, and often a /24 is one
// site's); "unknown" when the peer is no address.
func clientNetwork(a netip.Addr) string {
	if !a.IsValid() {
		return "unknown"
	}
	bits := 64
	if a.Is4() {
		bits = 24
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return "unknown"
	}
	return p.String()
}

func logUser(ss session) zap.Field      { return zap.String("user", ss.user.Name) }
func logPath(r *http.Request) zap.Field { return zap.String("path", r.URL.Path) }
