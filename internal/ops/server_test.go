package ops

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

// A listener serves from Listen to Shutdown; Shutdown waits for the request
// in flight.
func TestListenerServesUntilShutdown(t *testing.T) {
	inFlight := make(chan struct{})
	release := make(chan struct{})
	l := &Listener{Var: "LISTEN_ADDR", Addr: "127.0.0.1:0", Log: zap.NewNop(),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				close(inFlight)
				<-release
			}
			io.WriteString(w, "ok")
		})}
	if err := l.Listen(context.Background()); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- l.Serve(context.Background()) }()
	base := "http://" + l.Address()
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	slow := make(chan error, 1)
	go func() {
		resp, err := http.Get(base + "/slow")
		if err == nil {
			resp.Body.Close()
		}
		slow <- err
	}()
	<-inFlight
	stopped := make(chan error, 1)
	go func() { stopped <- l.Shutdown(context.Background()) }()
	if err := <-served; err != nil {
		t.Fatalf("Serve after Shutdown: %v, want nil", err)
	}
	select {
	case <-stopped:
		t.Fatal("Shutdown returned with a request in flight")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-slow; err != nil {
		t.Fatalf("the request in flight failed: %v", err)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if _, err := net.DialTimeout("tcp", l.Address(), time.Second); err == nil {
		t.Fatal("still accepting after Shutdown")
	}
}

func TestListenerErrorNamesTheVariable(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	l := &Listener{Var: "OPS_LISTEN_ADDR", Addr: taken.Addr().String(), Handler: http.NotFoundHandler(), Log: zap.NewNop()}
	err = l.Listen(context.Background())
	if err == nil || !strings.HasPrefix(err.Error(), "OPS_LISTEN_ADDR "+taken.Addr().String()) {
		t.Fatalf("Listen on a taken address: %v, want an error naming OPS_LISTEN_ADDR", err)
	}
	if err := l.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown of a listener that never listened: %v", err)
	}
}
