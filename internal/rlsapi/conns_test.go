package rlsapi

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// A connection's Read waits while one of its Writes is blocked because the
// peer does not read, and reads once the peer has read.
func TestReadWaitsWhileWriteBlocked(t *testing.T) {
	srv := New(Config{}, nil, zap.NewNop(), prometheus.NewRegistry())
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := srv.Listener(raw, 0)
	defer ln.Close()
	peer, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	c := sc.(*conn)

	big := bytes.Repeat([]byte("w"), 64<<20) // more than the sockets' buffers hold
	written := make(chan error, 1)
	go func() { _, err := c.Write(big); written <- err }()
	if _, err := peer.Write([]byte("request")); err != nil {
		t.Fatal(err)
	}
	for c.writing.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	read := make(chan string, 1)
	go func() {
		b := make([]byte, 16)
		n, _ := c.Read(b)
		read <- string(b[:n])
	}()
	select {
	case got := <-read:
		t.Fatalf("read %q while a write to a peer that does not read was blocked", got)
	case err := <-written:
		t.Fatalf("a 64 MiB write to a peer that does not read returned: %v", err)
	case <-time.After(200 * time.Millisecond): // only a wrong answer can come sooner
	}
	if _, err := io.CopyN(io.Discard, peer, int64(len(big))); err != nil {
		t.Fatal(err)
	}
	if err := <-written; err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-read:
		if got != "request" {
			t.Fatalf("read %q", got)
		}
	case <-time.After(10 * time.Second): // generous
		t.Fatal("no read after the write ended")
	}
}

// Close wakes a Read that waits for a blocked Write.
func TestCloseWakesWaitingRead(t *testing.T) {
	srv := New(Config{}, nil, zap.NewNop(), prometheus.NewRegistry())
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := srv.Listener(raw, 0)
	defer ln.Close()
	peer, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c := sc.(*conn)
	go func() { _, _ = c.Write(bytes.Repeat([]byte("w"), 64<<20)) }()
	for c.writing.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	read := make(chan error, 1)
	go func() { _, err := c.Read(make([]byte, 16)); read <- err }()
	_ = c.Close()
	select {
	case err := <-read:
		if err == nil {
			t.Fatal("read on a closed connection succeeded")
		}
	case <-time.After(10 * time.Second): // generous
		t.Fatal("a read waiting on a blocked write was not woken by Close")
	}
}
