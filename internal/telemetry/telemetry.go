// Package telemetry builds the logger and the Prometheus registry every
// service hands to its constructors (no package-level state), and deletes
// series of a labelled family by their labels.
package telemetry

import (
	"fmt"
	"io"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// NewLogger returns the logger of service (limiter, detector, archiver,
// devkafka) writing to w at level ("debug", "info", "warn", "error") in
// format ("json" or "console"). Every line names the service, so that the
// logs of several services read apart (make run interleaves them on one
// terminal): a "service" field in JSON, the logger's name in console,
// where it has a column of its own before the message ("limiter",
// "limiter.rules" for a part's logger). JSON logs are sampled so a burst of
// identical messages cannot slow the process down.
func NewLogger(w io.Writer, service, level, format string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.TimeKey = "ts"
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	switch format {
	case "json":
		enc = zapcore.NewJSONEncoder(encCfg)
	case "console":
		encCfg.EncodeLevel = zapcore.CapitalColorLevelEncoder
		enc = zapcore.NewConsoleEncoder(encCfg)
	default:
		return nil, fmt.Errorf("log format %q: expected json or console", format)
	}
	core := zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), lvl)
	core = zapcore.NewSamplerWithOptions(core, 1e9, 100, 100) // per second: first 100, then every 100th
	if format == "console" {
		return zap.New(core).Named(service), nil
	}
	return zap.New(core).With(zap.String("service", service)), nil
}

// NewRegistry returns a registry with the Go runtime and process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// MetricsHandler serves the registry in the Prometheus exposition format.
func MetricsHandler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}
