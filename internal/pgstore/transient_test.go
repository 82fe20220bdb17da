package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ratewarden/ratewarden/internal/archiver"
)

func TestIsTransient(t *testing.T) {
	pg := func(code string) error { return &pgconn.PgError{Code: code, Message: "test"} }
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"serialization failure", pg("40001"), true},
		{"deadlock", pg("40P01"), true},
		{"admin shutdown", pg("57P01"), true},
		{"cannot connect now", pg("57P03"), true},
		{"too many connections", pg("53300"), true},
		{"disk full", pg("53100"), true},
		{"connection failure", pg("08006"), true},
		{"read-only standby", pg("25006"), true},
		{"statement timeout", pg("57014"), true},
		{"wrapped serialization failure", fmt.Errorf("write batch: %w", pg("40001")), true},
		{"unique violation", pg("23505"), false},
		{"not null violation", pg("23502"), false},
		{"invalid text representation", pg("22P02"), false},
		{"character not in repertoire", pg("22021"), false},
		{"undefined table", pg("42P01"), false},
		{"bad password", pg("28P01"), false},
		{"database missing", pg("3D000"), false},
		{"empty code", pg(""), false},
		{"deadline", context.DeadlineExceeded, true},
		{"wrapped deadline", fmt.Errorf("flush: %w", context.DeadlineExceeded), true},
		{"cancelled", context.Canceled, false},
		{"connection reset", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, true},
		{"broken pipe", fmt.Errorf("x: %w", syscall.EPIPE), true},
		{"unexpected eof", fmt.Errorf("receive message: %w", io.ErrUnexpectedEOF), true},
		{"plain error", errors.New("boom"), false},
		{"row error", &archiver.RowError{Table: archiver.BansTable, Index: 3, Err: errors.New(`field "ban_id" is required`)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := isTransient(tc.err); got != tc.want {
				t.Errorf("isTransient(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestIsTransientRealErrors(t *testing.T) {
	ctx := context.Background()

	t.Run("connection refused", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		_, err = pgx.Connect(ctx, "postgres://postgres@127.0.0.1:"+strconv.Itoa(port)+"/x?sslmode=disable&connect_timeout=2")
		if err == nil {
			t.Fatal("connected to a closed port")
		}
		if !isTransient(err) {
			t.Errorf("isTransient(%v) = false, want true", err)
		}
	})

	s := newStore(t)
	t.Run("query timeout", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_, err := s.pool.Exec(ctx, "SELECT pg_sleep(5)")
		if err == nil {
			t.Fatal("pg_sleep(5) finished within 100ms")
		}
		if !isTransient(err) {
			t.Errorf("isTransient(%v) = false, want true", err)
		}
	})
	t.Run("terminated backend", func(t *testing.T) {
		conn, err := s.pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		pid := conn.Conn().PgConn().PID()
		if _, err := s.pool.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
			t.Fatal(err)
		}
		_, err = conn.Exec(ctx, "SELECT 1")
		if err == nil {
			t.Fatal("a terminated connection answered")
		}
		if !isTransient(err) {
			t.Errorf("isTransient(%v) = false, want true", err)
		}
	})
	t.Run("undefined table", func(t *testing.T) {
		_, err := s.pool.Exec(ctx, "SELECT * FROM no_such_table")
		if err == nil || isTransient(err) {
			t.Errorf("isTransient(%v) = true, want false", err)
		}
	})
	t.Run("missing database", func(t *testing.T) {
		cfg := s.pool.Config().ConnConfig.Copy()
		cfg.Database = "rwtest_does_not_exist"
		_, err := pgx.ConnectConfig(ctx, cfg)
		if err == nil || isTransient(err) {
			t.Errorf("isTransient(%v) = true, want false", err)
		}
	})
}
