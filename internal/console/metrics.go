package console

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

type metrics struct {
	logins  *prometheus.CounterVec
	refused *prometheus.CounterVec
	actions *prometheus.CounterVec
	pages   *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		logins: f.NewCounterVec(prometheus.CounterOpts{Name: "rate_limit_console_logins_total",
			Help: "Console logins, by result: ok, refused (wrong name or password), throttled, busy (too many logins being checked at once)."}, []string{"result"}),
		refused: f.NewCounterVec(prometheus.CounterOpts{Name: "rate_limit_console_requests_refused_total",
			Help: "Console requests refused before their handler, by reason: cross_site, csrf, no_session, role, reads_in_flight."}, []string{"reason"}),
		actions: f.NewCounterVec(prometheus.CounterOpts{Name: "rate_limit_console_actions_total",
			Help: "Bans, lifts and dynamic rule changes made in the console, by action (ban, lift, rule) and result (ok, kept, refused, error)."}, []string{"action", "result"}),
		pages: f.NewHistogramVec(prometheus.HistogramOpts{Name: "rate_limit_console_page_duration_seconds",
			Help: "Time to render a console page, by page.", Buckets: []float64{.01, .025, .05, .1, .2, .3, .5, 1, 2, 5}}, []string{"page"}),
	}
}
