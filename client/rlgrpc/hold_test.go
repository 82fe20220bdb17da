package rlgrpc

import (
	"context"
	"errors"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/ratewarden/ratewarden/client/clienttest"
)

// holdStream is a grpc.ServerStream with only a context.
type holdStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s holdStream) Context() context.Context    { return s.ctx }
func (s holdStream) SetHeader(metadata.MD) error { return nil }

// The interceptors release a call's hold when its handler returns,
// whatever it did, reports on or off: a second call made while the first
// holds the only slot is refused, and none is held once the handlers have
// returned, panicked or ended with an error. A release with reports off
// uses nothing.
func TestInterceptorsReleaseHolds(t *testing.T) {
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 5}})
	never := func(context.Context, string, codes.Code) bool { return false }
	for _, cfg := range []Config{{}, {ReportIf: never}} {
		f := clienttest.New()
		f.Concurrent(clienttest.Match{}, 1)
		unary := UnaryServerInterceptor(f, cfg)
		stream := StreamServerInterceptor(f, cfg)
		info := &grpc.UnaryServerInfo{FullMethod: "/pkg.S/M"}
		sinfo := &grpc.StreamServerInfo{FullMethod: "/pkg.S/Watch"}
		var inner error
		handlers := map[string]func() error{
			"returns": func() error {
				_, inner = unary(ctx, nil, info, func(context.Context, any) (any, error) { return "ok", nil })
				return nil
			},
			"fails":  func() error { return status.Error(codes.Aborted, "no") },
			"panics": func() error { panic("the handler fails") },
		}
		for name, body := range handlers {
			call := func() (err error) {
				defer func() {
					if p := recover(); p != nil {
						err = errors.New("panicked")
					}
				}()
				_, err = unary(ctx, nil, info, func(context.Context, any) (any, error) { return nil, body() })
				return err
			}
			err := call()
			if f.Held() != 0 {
				t.Fatalf("unary, handler %s: %d holds held once it ended (%v)", name, f.Held(), err)
			}
			err = func() (err error) {
				defer func() {
					if p := recover(); p != nil {
						err = errors.New("panicked")
					}
				}()
				return stream(nil, holdStream{ctx: ctx}, sinfo, func(any, grpc.ServerStream) error { return body() })
			}()
			if f.Held() != 0 {
				t.Fatalf("stream, handler %s: %d holds held once it ended (%v)", name, f.Held(), err)
			}
		}
		if status.Code(inner) != codes.ResourceExhausted {
			t.Fatalf("a call while the only slot is held: %v, want ResourceExhausted", inner)
		}
		var holds int
		for _, o := range f.Outcomes() {
			if o.Hold == "" {
				continue
			}
			holds++
			if cfg.ReportIf != nil && o.Status != 0 {
				t.Errorf("a release with reports off: status %d, want none (a release only)", o.Status)
			}
		}
		if holds != 2*len(handlers) {
			t.Fatalf("%d outcomes with a hold, want %d: %+v", holds, 2*len(handlers), f.Outcomes())
		}
	}
}
