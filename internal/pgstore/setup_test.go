package pgstore

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/ratewarden/ratewarden/internal/testkit/pgtest"
)

func TestOpenMigratedCreatesAndMigrates(t *testing.T) {
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	u := pgtest.Uncreated(t)
	for i := range 2 { // the second open finds the database and schema in place
		s, err := OpenMigrated(context.Background(), u, nil)
		if err != nil {
			t.Fatalf("open %d: %v", i+1, err)
		}
		var n int
		err = s.pool.QueryRow(context.Background(), "SELECT count(*) FROM schema_migrations").Scan(&n)
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
		if n != len(ms) {
			t.Errorf("open %d: %d migrations applied, want %d", i+1, n, len(ms))
		}
	}
}

func TestOpenMigratedCreateFailed(t *testing.T) {
	missing := nocreatedbURL(t)
	stop := errors.New("stop here")
	tests := []struct {
		name         string
		createFailed func(error) error
		want         []string // in the error
		wantIs       error
	}{
		{name: "nil stops with the create error", want: []string{"may not create it"}},
		{name: "its error stops", createFailed: func(error) error { return stop }, wantIs: stop},
		{name: "nil from it carries on to open", createFailed: func(error) error { return nil }, want: []string{"does not exist"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var seen error
			createFailed := tt.createFailed
			if createFailed != nil {
				createFailed = func(err error) error { seen = err; return tt.createFailed(err) }
			}
			s, err := OpenMigrated(context.Background(), missing, createFailed)
			if err == nil {
				s.Close()
				t.Fatal("opened a database that does not exist")
			}
			if tt.createFailed != nil && (seen == nil || !strings.Contains(seen.Error(), "may not create it")) {
				t.Errorf("createFailed saw %v, want the create error", seen)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %v, want %v", err, tt.wantIs)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// nocreatedbURL is the URL of a database that does not exist, for a role
// that may not create it.
func nocreatedbURL(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	u := pgtest.Database(t)
	admin, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	parsed, _ := url.Parse(u)
	role := "rwtest_nocreatedb_" + strings.TrimPrefix(parsed.Path, "/rwtest_") // roles are cluster-wide: unique too
	if _, err := admin.Exec(ctx, "CREATE ROLE "+role+" LOGIN NOCREATEDB"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+role); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	parsed.User = url.User(role)
	parsed.Path = "/" + role + "_missing"
	return parsed.String()
}
