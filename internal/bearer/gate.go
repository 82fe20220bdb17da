package bearer

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/jsonwire"
)

// Gate is the door of one API, whatever its transport: it admits a request
// whose authorization carries one of the API's tokens, and logs and counts
// every refusal, in rate_limit_unauthenticated_requests_total{api}. The
// decision APIs (/v1/check, /v1/check/batch, /v1/auth, POST /json and
// Envoy's gRPC API) share one gate, so API_TOKENS admits a gateway on each
// alike; the admin API has its own. A gate without tokens, or a nil one,
// admits every request.
type Gate struct {
	api     string
	realm   string
	tokens  Tokens
	log     *zap.Logger
	refused prometheus.Counter
}

// refusedRequests is rate_limit_unauthenticated_requests_total, registered
// once per registry and shared by the gates on it.
func refusedRequests(reg prometheus.Registerer) *prometheus.CounterVec {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rate_limit_unauthenticated_requests_total",
		Help: "Requests refused for want of a valid bearer token, by API (decisions: API_TOKENS on every transport; admin: ADMIN_TOKEN).",
	}, []string{"api"})
	if err := reg.Register(vec); err != nil {
		if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
			return are.ExistingCollector.(*prometheus.CounterVec)
		}
		panic(err)
	}
	return vec
}

// NewGate returns the gate of api (its metric label, "decisions" or
// "admin"), admitting tokens; realm names it in the 401's challenge. Its
// counter is on reg; its refusals go to log, which should sample: a flood
// of refusals must not flood the log.
func NewGate(api, realm string, tokens []string, log *zap.Logger, reg prometheus.Registerer) *Gate {
	if log == nil {
		log = zap.NewNop()
	}
	g := &Gate{api: api, realm: realm, log: log, refused: refusedRequests(reg).WithLabelValues(api)}
	if len(tokens) > 0 {
		g.tokens = New(tokens...)
	}
	return g
}

// Open reports whether g admits every request: it has no tokens.
func (g *Gate) Open() bool { return g == nil || len(g.tokens) == 0 }

// Allows reports whether authorization, an Authorization header's value
// (or gRPC's authorization metadata), may pass.
func (g *Gate) Allows(authorization string) bool {
	return g.Open() || g.tokens.Allows(authorization)
}

// AllowsBytes is Allows for a header held in bytes (fasthttp's), without a
// copy.
func (g *Gate) AllowsBytes(authorization []byte) bool {
	return g.Open() || g.tokens.AllowsBytes(authorization)
}

// Refused records a refusal of a request from source to route: logged,
// counted. The caller answers it (Unauthorized, or its transport's way).
func (g *Gate) Refused(source, route string) {
	g.log.Warn("request refused: missing or invalid bearer token",
		zap.String("api", g.api), zap.String("source", source), zap.String("route", route))
	g.refused.Inc()
}

// Challenge is the WWW-Authenticate value of g's 401 answers.
func (g *Gate) Challenge() string { return `Bearer realm="` + g.realm + `"` }

// Message is the error of g's refusals.
const Message = "missing or invalid bearer token"

// Unauthorized answers a refused request: 401 with g's challenge and
// {"error": Message}.
func (g *Gate) Unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", g.Challenge())
	jsonwire.WriteError(w, http.StatusUnauthorized, Message)
}

// Guard lets requests to next through g: a refused one is recorded under
// route and answered Unauthorized.
func (g *Gate) Guard(route string, next http.HandlerFunc) http.HandlerFunc {
	if g.Open() {
		return next
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if !g.Allows(r.Header.Get("Authorization")) {
			g.Refused(r.RemoteAddr, route)
			g.Unauthorized(w)
			return
		}
		next(w, r)
	}
}
