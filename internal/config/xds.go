package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// xds checks the xDS settings together and builds the client's TLS: with
// CONFIG_TYPE=GRPC_XDS_SOTW the RLS config comes from the management
// server only (envoyproxy/ratelimit runs one provider), and the TLS files
// are read now, so a missing one stops the process at start.
func (e *env) xds(c *Limiter) {
	if c.ConfigType != ConfigXDS {
		return
	}
	if c.RLSConfigDir != "" {
		e.errs = append(e.errs, errors.New("RLS_CONFIG_DIR: not with CONFIG_TYPE=GRPC_XDS_SOTW (the RLS config comes from the xDS server)"))
	}
	x := &c.XDS
	if x.ClientCertFile != "" || x.ClientKeyFile != "" || x.CAFile != "" || x.ServerSAN != "" {
		if !x.UseTLS {
			e.errs = append(e.errs, errors.New("CONFIG_GRPC_XDS_SERVER_USE_TLS: set it to true to use the CONFIG_GRPC_XDS_* TLS settings"))
			return
		}
	}
	if !x.UseTLS {
		return
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: x.ServerSAN}
	switch {
	case x.ClientCertFile != "" && x.ClientKeyFile != "":
		cert, err := tls.LoadX509KeyPair(x.ClientCertFile, x.ClientKeyFile)
		if err != nil {
			e.errs = append(e.errs, fmt.Errorf("CONFIG_GRPC_XDS_CLIENT_TLS_CERT and CONFIG_GRPC_XDS_CLIENT_TLS_KEY: %w", err))
			return
		}
		cfg.Certificates = []tls.Certificate{cert}
	case x.ClientCertFile != "" || x.ClientKeyFile != "":
		e.errs = append(e.errs, errors.New("CONFIG_GRPC_XDS_CLIENT_TLS_CERT and CONFIG_GRPC_XDS_CLIENT_TLS_KEY: both or neither"))
		return
	}
	if x.CAFile != "" {
		pem, err := os.ReadFile(x.CAFile)
		if err != nil {
			e.errs = append(e.errs, fmt.Errorf("CONFIG_GRPC_XDS_SERVER_TLS_CACERT: %w", err))
			return
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			e.errs = append(e.errs, fmt.Errorf("CONFIG_GRPC_XDS_SERVER_TLS_CACERT %s: expected PEM certificates, found none", x.CAFile))
			return
		}
		cfg.RootCAs = pool
	}
	x.TLS = cfg
}

// pairs parses a comma-separated list of key and value joined by sep
// ("k1=v1,k2=v2"); empty: none.
func pairs(sep string) func(string) (map[string]string, error) {
	return func(v string) (map[string]string, error) {
		out := map[string]string{}
		for _, item := range list(v) {
			k, val, ok := strings.Cut(item, sep)
			if k = strings.TrimSpace(k); !ok || k == "" {
				return out, expected("a comma-separated list of key"+sep+"value", item)
			}
			out[k] = strings.TrimSpace(val)
		}
		return out, nil
	}
}

// factor parses the backoff's growth factor: a positive number.
func factor(v string) (float64, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f > 0) || f > 100 {
		return 0, expected("a number above 0, at most 100", v)
	}
	return f, nil
}

// xdsVars are the rows of the xDS source of the RLS config.
var xdsVars = []Var{
	{Name: "CONFIG_TYPE", Default: ConfigFile, Readers: limiterOnly,
		Meaning: "where the RLS config comes from: `FILE` (`RLS_CONFIG_DIR`) or `GRPC_XDS_SOTW`, an xDS management server " +
			"(see [Configuration over xDS](envoy.md#configuration-over-xds-envoy-gateway))",
		load: bind(inLimiter(func(c *Limiter) *string { return &c.ConfigType }), oneOf(ConfigFile, ConfigXDS))},
	{Name: "CONFIG_GRPC_XDS_SERVER_URL", Default: "localhost:18000", Readers: limiterOnly,
		Meaning: "with `GRPC_XDS_SOTW`: the management server's `host:port`",
		load:    bind(inLimiter(func(c *Limiter) *string { return &c.XDS.ServerURL }), text)},
	{Name: "CONFIG_GRPC_XDS_NODE_ID", Default: "default", Readers: limiterOnly,
		Meaning: "the `node.id` the limiter subscribes as (Envoy Gateway sends the config for its rate limit deployment's node)",
		load:    bind(inLimiter(func(c *Limiter) *string { return &c.XDS.NodeID }), text)},
	{Name: "CONFIG_GRPC_XDS_NODE_METADATA", Readers: limiterOnly,
		Meaning: "`node.metadata` as `key=value,...` (string values)",
		load:    bind(inLimiter(func(c *Limiter) *map[string]string { return &c.XDS.NodeMetadata }), pairs("="))},
	{Name: "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", Readers: limiterOnly,
		Meaning: "gRPC metadata sent with the subscription, as `key:value,...`",
		load:    bind(inLimiter(func(c *Limiter) *map[string]string { return &c.XDS.Headers }), pairs(":"))},
	{Name: "CONFIG_GRPC_XDS_SERVER_USE_TLS", Default: "false", Readers: limiterOnly,
		Meaning: "`true`: TLS to the management server (system roots, plus `CONFIG_GRPC_XDS_SERVER_TLS_CACERT`)",
		load:    bind(inLimiter(func(c *Limiter) *bool { return &c.XDS.UseTLS }), boolean)},
	{Name: "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", Readers: limiterOnly,
		Meaning: "the limiter's client certificate (PEM) for mTLS, with `CONFIG_GRPC_XDS_CLIENT_TLS_KEY`",
		load:    bind(inLimiter(func(c *Limiter) *string { return &c.XDS.ClientCertFile }), text)},
	{Name: "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", Readers: limiterOnly,
		Meaning: "its private key (PEM)",
		load:    bind(inLimiter(func(c *Limiter) *string { return &c.XDS.ClientKeyFile }), text)},
	{Name: "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", Readers: limiterOnly,
		Meaning: "a PEM file of authorities the server's certificate may chain to, beside the system's",
		load:    bind(inLimiter(func(c *Limiter) *string { return &c.XDS.CAFile }), text)},
	{Name: "CONFIG_GRPC_XDS_SERVER_TLS_SAN", Readers: limiterOnly,
		Meaning: "the name the server's certificate must carry, when not the host of `CONFIG_GRPC_XDS_SERVER_URL`",
		load:    bind(inLimiter(func(c *Limiter) *string { return &c.XDS.ServerSAN }), text)},
	{Name: "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", Default: "3s", Readers: limiterOnly,
		Meaning: "read and checked, and changes nothing, as in envoyproxy/ratelimit: reconnections follow `XDS_CLIENT_BACKOFF_*`",
		load:    bind(inLimiter(func(c *Limiter) *time.Duration { return &c.XDS.ConnectRetryInterval }), positiveDuration)},
	{Name: "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", Default: "10s", Readers: limiterOnly,
		Meaning: "the shortest wait before connecting again to the management server",
		load:    bind(inLimiter(func(c *Limiter) *time.Duration { return &c.XDS.BackoffInitial }), positiveDuration)},
	{Name: "XDS_CLIENT_BACKOFF_MAX_INTERVAL", Default: "60s", Readers: limiterOnly,
		Meaning: "the longest",
		load:    bind(inLimiter(func(c *Limiter) *time.Duration { return &c.XDS.BackoffMax }), positiveDuration)},
	{Name: "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", Default: "0.5", Readers: limiterOnly,
		Meaning: "the wait's growth per failed attempt, as envoyproxy/ratelimit uses it: `initial × factor^attempts`, " +
			"so the default 0.5 keeps every wait at the initial interval; 2 doubles it",
		load: bind(inLimiter(func(c *Limiter) *float64 { return &c.XDS.BackoffFactor }), factor)},
	{Name: "XDS_CLIENT_BACKOFF_JITTER", Default: "true", Readers: limiterOnly,
		Meaning: "`true`: each wait is drawn between the initial interval and its grown value",
		load:    bind(inLimiter(func(c *Limiter) *bool { return &c.XDS.BackoffJitter }), boolean)},
	{Name: "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", Default: "0", Readers: limiterOnly,
		Meaning: "the largest config response accepted; `0`: gRPC's 4 MiB",
		load:    bind(inLimiter(func(c *Limiter) *int { return &c.XDS.MaxMsgSize }), intBetween(0, 1<<30))},
	{Name: "FORCE_START_WITHOUT_INITIAL_CONFIG", Default: "false", Readers: limiterOnly,
		Meaning: "`true`: with `GRPC_XDS_SOTW`, open the listeners without waiting for the first config " +
			"(its descriptors are not limited until it arrives)",
		load: bind(inLimiter(func(c *Limiter) *bool { return &c.XDS.ForceStart }), boolean)},
}
