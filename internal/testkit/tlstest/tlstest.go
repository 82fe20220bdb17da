// Package tlstest makes a throwaway certificate authority and certificates
// for tests. Keys are generated in the test and written to its temporary
// directory, never committed; every certificate is valid from an hour before
// the test runs to an hour after, so no date is fixed.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority of one test.
type CA struct {
	tb   testing.TB
	name string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // the CA certificate, PEM
}

// NewCA returns a new authority named name, its certificate written to the
// test's temporary directory.
func NewCA(tb testing.TB, name string) *CA {
	tb.Helper()
	key := newKey(tb)
	tmpl := template(tb, name)
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	ca := &CA{tb: tb, name: name, cert: cert, key: key}
	ca.file = write(tb, name+"-ca.pem", "CERTIFICATE", der)
	return ca
}

// File is the path of the authority's certificate (PEM).
func (ca *CA) File() string { return ca.file }

// Pool trusts the authority.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// Server issues a server certificate for hosts (IP addresses or DNS names)
// and returns the paths of its certificate and key files (PEM).
func (ca *CA) Server(hosts ...string) (certFile, keyFile string) {
	ca.tb.Helper()
	tmpl := template(ca.tb, hosts[0])
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, key := ca.issue(tmpl)
	return write(ca.tb, ca.name+"-server.pem", "CERTIFICATE", der), write(ca.tb, ca.name+"-server-key.pem", "PRIVATE KEY", key)
}

// Client issues a client certificate named name.
func (ca *CA) Client(name string) tls.Certificate {
	ca.tb.Helper()
	tmpl := template(ca.tb, name)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	der, key := ca.issue(tmpl)
	cert, err := tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}))
	if err != nil {
		ca.tb.Fatal(err)
	}
	return cert
}

// issue signs tmpl for a new key and returns the certificate and the key
// (PKCS #8), both DER.
func (ca *CA) issue(tmpl *x509.Certificate) (cert, key []byte) {
	ca.tb.Helper()
	k := newKey(ca.tb)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &k.PublicKey, ca.key)
	if err != nil {
		ca.tb.Fatal(err)
	}
	key, err = x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		ca.tb.Fatal(err)
	}
	return der, key
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	tb.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	return k
}

// template is a certificate for name, valid from an hour ago for two hours.
func template(tb testing.TB, name string) *x509.Certificate {
	tb.Helper()
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(time.Hour),
	}
}

func write(tb testing.TB, name, kind string, der []byte) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}
