// Package pgstore is the PostgreSQL adapter of the archive: it creates the
// database and schema (embedded migrations, the dynamic rules' tables
// included: pgrules keeps those), maintains the daily partitions of
// rate_limit_violations and outcomes, and writes the archiver's batches of
// violations, bans, outcomes and dead letters in one duplicate-safe
// transaction (archiver.Store). The rows it speaks are the archiver's
// types; what Postgres would refuse in a row is its own knowledge
// (ValidateViolation, ValidateBan, ValidateOutcome). The
// tables and views are what analysts query (docs/events.md "Analysts: the Postgres
// tables").
package pgstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Store is a pool of connections to the archive database.
type Store struct {
	pool *pgxpool.Pool
}

const defaultConnectTimeout = 5 * time.Second

// Open connects a pool to the database at url (a postgres:// URL or a
// key=value DSN) and checks that it answers. Errors name DATABASE_URL and
// its target (user, host, port, database; never the password) and wrap the
// cause, so isTransient tells a server that is down from a bad URL.
func Open(ctx context.Context, url string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgconn's parse errors already redact the password.
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "ratewarden"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL %s: %w", target(cfg.ConnConfig), err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("DATABASE_URL %s: %w", target(cfg.ConnConfig), err)
	}
	return &Store{pool: pool}, nil
}

// Pool is the store's connection pool, for the adapters that share its
// database and schema (pgrules).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Close closes every connection of the pool, waiting for those in use.
func (s *Store) Close() { s.pool.Close() }

// Ping checks that the database answers (for /readyz).
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

// EnsureDatabase creates the database named in url when it does not exist,
// connecting to the server's "postgres" database to do so. It is a no-op
// when the database exists, and tolerates another process creating it at the
// same moment. A role that may not create databases gets an error saying so
// and naming DATABASE_URL.
func EnsureDatabase(ctx context.Context, url string) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = defaultConnectTimeout
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err == nil {
		return conn.Close(ctx)
	}
	if pgCode(err) != "3D000" { // invalid_catalog_name: the database does not exist
		return fmt.Errorf("DATABASE_URL %s: %w", target(cfg), err)
	}

	admin := cfg.Copy()
	admin.Database = "postgres"
	conn, err = pgx.ConnectConfig(ctx, admin)
	if err != nil {
		return fmt.Errorf("DATABASE_URL %s: database %q does not exist, and connecting to database \"postgres\" to create it: %w",
			target(cfg), cfg.Database, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{cfg.Database}.Sanitize()); err != nil {
		switch pgCode(err) {
		case "42P04", // duplicate_database: created concurrently
			"23505": // unique_violation on pg_database's name: the same, when the two creations overlap
			return nil
		case "42501": // insufficient_privilege
			return fmt.Errorf("DATABASE_URL %s: database %q does not exist and role %q may not create it "+
				"(create it as a superuser, grant CREATEDB, or point DATABASE_URL at an existing database): %w",
				target(cfg), cfg.Database, cfg.User, err)
		}
		return fmt.Errorf("DATABASE_URL %s: create database %q: %w", target(cfg), cfg.Database, err)
	}
	return nil
}

// target describes where cfg connects, without the password.
func target(cfg *pgx.ConnConfig) string {
	host := cfg.Host
	if !strings.HasPrefix(host, "/") { // not a Unix socket directory
		host = net.JoinHostPort(host, strconv.Itoa(int(cfg.Port)))
	}
	return "postgres://" + cfg.User + "@" + host + "/" + cfg.Database
}

// pgCode is the SQLSTATE of a server error in err's chain, or "".
func pgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}
