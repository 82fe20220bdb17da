package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// TLSFiles names the files of a listener's certificate and, optionally, of
// the authorities its clients' certificates must chain to.
type TLSFiles struct {
	CertFile     string
	KeyFile      string
	ClientCAFile string // empty: no client certificate asked for
}

// serverTLS returns the TLS configuration of a listener serving f (read
// from TLS_CERT_FILE, TLS_KEY_FILE and TLS_CLIENT_CA_FILE), nil when TLS is
// off. The files are read now, so a missing file or a key that does not
// match its certificate stops the process at start.
func (e *env) serverTLS(f TLSFiles) *tls.Config {
	switch {
	case f.CertFile == "" && f.KeyFile == "":
		if f.ClientCAFile != "" {
			e.errs = append(e.errs, errors.New("TLS_CLIENT_CA_FILE: client certificates are verified in the TLS handshake: set TLS_CERT_FILE and TLS_KEY_FILE too"))
		}
		return nil
	case f.CertFile == "":
		e.errs = append(e.errs, errors.New("TLS_CERT_FILE: required when TLS_KEY_FILE is set"))
		return nil
	case f.KeyFile == "":
		e.errs = append(e.errs, errors.New("TLS_KEY_FILE: required when TLS_CERT_FILE is set"))
		return nil
	}
	for _, v := range []struct{ name, path string }{{"TLS_CERT_FILE", f.CertFile}, {"TLS_KEY_FILE", f.KeyFile}} {
		if _, err := os.ReadFile(v.path); err != nil {
			e.errs = append(e.errs, fmt.Errorf("%s: %w", v.name, err))
			return nil
		}
	}
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		e.errs = append(e.errs, fmt.Errorf("TLS_CERT_FILE and TLS_KEY_FILE: expected a PEM certificate and its private key: %w", err))
		return nil
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if f.ClientCAFile != "" {
		pem, err := os.ReadFile(f.ClientCAFile)
		if err != nil {
			e.errs = append(e.errs, fmt.Errorf("TLS_CLIENT_CA_FILE: %w", err))
			return nil
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			e.errs = append(e.errs, fmt.Errorf("TLS_CLIENT_CA_FILE %s: expected PEM certificates, found none", f.ClientCAFile))
			return nil
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg
}
