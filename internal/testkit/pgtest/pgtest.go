// Package pgtest gives integration tests a database of their own on the
// local PostgreSQL server, dropped when the test ends, because the server is
// shared with other tests and processes.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ratewarden/ratewarden/internal/testkit"
)

// defaultServerURL is the server the tests use when DATABASE_URL is unset.
const defaultServerURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// ServerURL is the server the tests use: DATABASE_URL's server, or
// defaultServerURL. Only its host, port, user, password and options matter;
// Database replaces its database name.
func ServerURL() string {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u
	}
	return defaultServerURL
}

// Require skips the test, or fails it when CI is set, unless the server
// at ServerURL answers. The test process asks once.
func Require(tb testing.TB) {
	tb.Helper()
	if err := answers(); err != nil {
		testkit.Unavailable(tb, "postgres at %s does not answer (is PostgreSQL running? set DATABASE_URL): %v", redacted(ServerURL()), err)
	}
}

// RequiredServerURL is ServerURL for a test that connects to the server
// itself: Require, then ServerURL.
func RequiredServerURL(tb testing.TB) string {
	tb.Helper()
	Require(tb)
	return ServerURL()
}

var answers = sync.OnceValue(func() error {
	server, err := url.Parse(ServerURL())
	if err != nil {
		return err
	}
	admin := *server
	admin.Path = "/postgres"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin.String())
	if err != nil {
		return err
	}
	return conn.Close(context.Background())
})

// Database creates a database with a fresh name (rwtest_<hex>) on the test
// server and returns its URL (the test is skipped, or failed when CI is
// set, when the server does not answer: Require). The database is dropped when the test ends,
// after the test's own cleanups (which should close their pools), and
// WITH (FORCE) so a leaked connection cannot keep it alive.
func Database(tb testing.TB) string {
	tb.Helper()
	dbURL, admin, name := fresh(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		tb.Fatalf("postgres at %s does not answer (is PostgreSQL running? set DATABASE_URL): %v", redacted(admin), err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		tb.Fatalf("create test database %s: %v", name, err)
	}
	return dbURL
}

// Uncreated returns the URL of a database of a fresh name that does not
// exist yet, for a test of a process that creates it (the archiver does).
// Whatever creates it, the database is dropped when the test ends, as
// Database's is.
func Uncreated(tb testing.TB) string {
	tb.Helper()
	dbURL, _, _ := fresh(tb)
	return dbURL
}

// fresh names a database, arranges for it to be dropped when the test ends,
// and returns its URL, the URL of the server's postgres database and the
// name.
func fresh(tb testing.TB) (dbURL, adminURL, name string) {
	tb.Helper()
	Require(tb)
	server, err := url.Parse(ServerURL())
	if err != nil || (server.Scheme != "postgres" && server.Scheme != "postgresql") {
		tb.Fatalf("DATABASE_URL %q: pgtest needs a postgres:// URL", redacted(ServerURL()))
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name = "rwtest_" + hex.EncodeToString(b)

	admin := *server
	admin.Path = "/postgres"
	tb.Cleanup(func() { drop(tb, admin.String(), name) })
	db := *server
	db.Path = "/" + name
	return db.String(), admin.String(), name
}

func drop(tb testing.TB, adminURL, name string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		tb.Logf("drop test database %s: %v", name, err)
		return
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		tb.Logf("drop test database %s: %v", name, err)
	}
}

func redacted(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable)"
	}
	return u.Redacted()
}
