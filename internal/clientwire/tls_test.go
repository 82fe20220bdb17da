package clientwire_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ratewarden/ratewarden/client"
	"github.com/ratewarden/ratewarden/internal/testkit/tlstest"
)

// An https limiter that asks for client certificates (mTLS): the client's
// TLS config verifies it with the operator's CA and presents the
// application's certificate; without one, the handshake fails and the
// limiter never answers.
func TestCheckOverMutualTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "ratewarden test CA")
	certFile, keyFile := ca.Server("127.0.0.1")
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"allowed":true,"reason":"ok","rule_id":"","algorithm":"","limit":0,"remaining":0,"reset_after_ms":0,"retry_after_ms":0,"mode":"redis","shadow":false,"event_id":"e"}`)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool()}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	check := func(cfg *tls.Config) (client.Decision, error) {
		c, err := client.New(client.Config{URL: srv.URL, TLS: cfg, OnFailure: client.FailClosed})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		return c.Check(context.Background(), &client.Request{IP: "203.0.113.7", Endpoint: "/a"})
	}
	d, err := check(&tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{ca.Client("app")}})
	if err != nil || !d.Allowed || d.Fallback {
		t.Fatalf("with the client certificate: %+v, %v", d, err)
	}
	d, err = check(&tls.Config{RootCAs: ca.Pool()})
	var e *client.Error
	if !errors.As(err, &e) || e.Answered || d.Allowed || !d.Fallback {
		t.Fatalf("without a client certificate: %+v, %v; want no answer and the policy's refusal", d, err)
	}
	if _, err := client.New(client.Config{URL: "http://127.0.0.1:1", TLS: &tls.Config{}}); err == nil {
		t.Fatal("TLS accepted for an http URL")
	}
}
