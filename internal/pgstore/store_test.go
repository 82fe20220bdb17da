package pgstore

import (
	"context"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/ratewarden/ratewarden/internal/testkit/pgtest"
)

func TestEnsureDatabase(t *testing.T) {
	ctx := context.Background()
	// A database name of the test's own: create it through pgtest, drop it,
	// and let EnsureDatabase create it again (pgtest's cleanup drops it).
	u := pgtest.Database(t)
	parsed, _ := url.Parse(u)
	name := strings.TrimPrefix(parsed.Path, "/")
	admin, err := pgx.Connect(ctx, pgtest.RequiredServerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "DROP DATABASE "+name); err != nil {
		t.Fatal(err)
	}

	for i := range 2 { // the second call is a no-op
		if err := EnsureDatabase(ctx, u); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
	s := openStore(t, u)
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate the created database: %v", err)
	}
}

func TestEnsureDatabaseWithoutCreatedb(t *testing.T) {
	ctx := context.Background()
	parsed, err := url.Parse(nocreatedbURL(t))
	if err != nil {
		t.Fatal(err)
	}
	role := parsed.User.Username()
	parsed.User = url.UserPassword(role, "secret-password")
	err = EnsureDatabase(ctx, parsed.String())
	if err == nil {
		t.Fatal("EnsureDatabase created a database for a role without CREATEDB")
	}
	msg := err.Error()
	for _, want := range []string{"DATABASE_URL", role + "_missing", "may not create it"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
	if strings.Contains(msg, "secret-password") {
		t.Errorf("error %q shows the password", msg)
	}
}

func TestOpenErrorNamesTargetWithoutPassword(t *testing.T) {
	_, err := Open(context.Background(), "postgres://someone:secret-password@127.0.0.1:1/archive?sslmode=disable&connect_timeout=2")
	if err == nil {
		t.Fatal("Open succeeded against a closed port")
	}
	msg := err.Error()
	if !strings.Contains(msg, "DATABASE_URL postgres://someone@127.0.0.1:1/archive") {
		t.Errorf("error %q does not name the target", msg)
	}
	if strings.Contains(msg, "secret-password") {
		t.Errorf("error %q shows the password", msg)
	}
	if !isTransient(err) {
		t.Errorf("isTransient(%q) = false, want true", msg)
	}
}

func TestMigrate(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, pgtest.Database(t))
	want, err := migrations()
	if err != nil {
		t.Fatal(err)
	}

	t.Run("concurrently", func(t *testing.T) {
		// Three archivers start at once, each with its own pool.
		stores := []*Store{s, openStore(t, s.pool.Config().ConnString()), openStore(t, s.pool.Config().ConnString())}
		var wg sync.WaitGroup
		errs := make([]error, len(stores))
		for i, st := range stores {
			wg.Go(func() { errs[i] = st.Migrate(ctx) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("archiver %d: %v", i, err)
			}
		}
		if n := queryInt(t, s, "SELECT count(*) FROM schema_migrations"); n != len(want) {
			t.Errorf("schema_migrations has %d rows, want %d", n, len(want))
		}
	})
	t.Run("again", func(t *testing.T) {
		if err := s.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		if n := queryInt(t, s, "SELECT count(*) FROM schema_migrations"); n != len(want) {
			t.Errorf("schema_migrations has %d rows, want %d", n, len(want))
		}
	})
	t.Run("contract columns", func(t *testing.T) {
		for table, cols := range map[string][]string{
			"rate_limit_violations": {"event_id", "occurred_at", "user_id", "ip_address", "endpoint", "http_method",
				"user_tier", "rule_id", "algorithm", "reason", "limit_value", "current_count", "retry_after_ms",
				"shadow", "instance", "archived_at"},
			"bans": {"ban_id", "ts", "action", "scope", "subject", "reason", "count", "threshold", "window_s",
				"duration_s", "expires_at", "source", "dry_run", "note", "evidence", "archived_at"},
			"outcomes": {"event_id", "occurred_at", "user_id", "ip_address", "endpoint", "http_method", "user_tier",
				"status", "cost", "banned", "instance", "archived_at", "user_banned"},
			"dead_letters":                   {"id", "topic", "partition", "offset", "raw", "error", "received_at"},
			"top_offenders_1h":               {"ip_address", "violations", "distinct_endpoints", "first_seen", "last_seen"},
			"violations_per_endpoint_hourly": {"hour", "endpoint", "rule_id", "violations"},
			"active_bans":                    {"scope", "subject", "expires_at"},
			"failures_per_endpoint_hourly":   {"hour", "endpoint", "status", "failures", "distinct_sources", "distinct_users"},
			"failures_per_source_1h": {"ip_address", "failures", "distinct_users", "distinct_endpoints", "first_seen",
				"last_seen", "statuses"},
		} {
			for _, col := range cols {
				if queryInt(t, s, `SELECT count(*) FROM information_schema.columns
					WHERE table_schema = current_schema() AND table_name = $1 AND column_name = $2`, table, col) != 1 {
					t.Errorf("%s has no column %s", table, col)
				}
			}
		}
		if typ := queryString(t, s, `SELECT data_type FROM information_schema.columns WHERE table_name = 'rate_limit_violations' AND column_name = 'ip_address'`); typ != "inet" {
			t.Errorf("ip_address is %s, want inet", typ)
		}
	})
	t.Run("reader role", func(t *testing.T) {
		for _, rel := range []string{"rate_limit_violations", "bans", "dead_letters", "top_offenders_1h",
			"violations_per_endpoint_hourly", "active_bans", "outcomes", "failures_per_endpoint_hourly", "failures_per_source_1h"} {
			if queryInt(t, s, "SELECT has_table_privilege('ratewarden_reader', $1, 'SELECT')::int", rel) != 1 {
				t.Errorf("ratewarden_reader may not read %s", rel)
			}
			if queryInt(t, s, "SELECT has_table_privilege('ratewarden_reader', $1, 'INSERT')::int", rel) != 0 {
				t.Errorf("ratewarden_reader may write %s", rel)
			}
		}
		if queryInt(t, s, "SELECT rolcanlogin::int FROM pg_roles WHERE rolname = 'ratewarden_reader'") != 0 {
			t.Error("ratewarden_reader can log in")
		}
	})
}

func queryString(t *testing.T, s *Store, sql string, args ...any) string {
	t.Helper()
	var v string
	if err := s.pool.QueryRow(context.Background(), sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}
