package console

import (
	"cmp"
	"context"
	"math"
	"slices"

	"github.com/ratewarden/ratewarden/internal/promquery"
)

// Prometheus answers the console's instant queries (promquery.Client): the
// figures only the metrics hold.
type Prometheus interface {
	Query(ctx context.Context, query string) ([]promquery.Sample, error)
}

// The console's queries. A rule's hits are its requests of every result;
// its denials those it refused (rate_limited, not a shadow rule's would-be
// refusals, which were allowed). Every limiter counts its own: they add up.
// The window is rulesWindow's.
const (
	hitsQuery   = `sum by (rule) (increase(rate_limit_requests_total{rule!=""}[24h]))`
	deniedQuery = `sum by (rule) (increase(rate_limit_requests_total{rule!="",result="rate_limited",shadow="false"}[24h]))`
	lagQuery    = `max by (source) (rate_limit_detector_consumer_lag)`
)

// Where a page's figures of Prometheus stand, as its template reads them.
const (
	promOff         = "off" // CONSOLE_PROMETHEUS_URL is unset
	promUnavailable = "unavailable"
	promOK          = "ok"
)

// sourceLag is the detector's lag on one of its sources, in messages.
type sourceLag struct {
	Source   string
	Messages int64
}

// detectorLag returns the detector's lag by source (the largest of its
// replicas'), and the figures' status.
func (s *Server) detectorLag(ctx context.Context) ([]sourceLag, string) {
	if s.cfg.Prometheus == nil {
		return nil, promOff
	}
	samples, err := s.cfg.Prometheus.Query(ctx, lagQuery)
	if err != nil {
		s.unavailable("Prometheus", err)
		return nil, promUnavailable
	}
	var lag []sourceLag
	for source, v := range promquery.By(samples, "source") {
		lag = append(lag, sourceLag{Source: source, Messages: count(v)})
	}
	slices.SortFunc(lag, func(a, b sourceLag) int { return cmp.Compare(a.Source, b.Source) })
	return lag, promOK
}

// ruleCounts returns each rule's hits and denials over the last day as
// Prometheus counts them, and the figures' status.
func (s *Server) ruleCounts(ctx context.Context) (hits, denied map[string]float64, status string) {
	if s.cfg.Prometheus == nil {
		return nil, nil, promOff
	}
	h, err := s.cfg.Prometheus.Query(ctx, hitsQuery)
	var d []promquery.Sample
	if err == nil {
		d, err = s.cfg.Prometheus.Query(ctx, deniedQuery)
	}
	if err != nil {
		s.unavailable("Prometheus", err)
		return nil, nil, promUnavailable
	}
	return promquery.By(h, "rule"), promquery.By(d, "rule"), promOK
}

// count rounds an increase, which Prometheus extrapolates to the window's
// edges, to the whole requests shown; a hostile value stays in range.
func count(v float64) int64 {
	return int64(math.Round(min(max(v, 0), 1e15)))
}
