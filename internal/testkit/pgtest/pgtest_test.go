package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestDatabase(t *testing.T) {
	Require(t)
	var name string
	t.Run("create", func(t *testing.T) {
		u := Database(t)
		conn, err := pgx.Connect(context.Background(), u)
		if err != nil {
			t.Fatalf("connect to the test database: %v", err)
		}
		defer conn.Close(context.Background())
		if err := conn.QueryRow(context.Background(), "SELECT current_database()").Scan(&name); err != nil {
			t.Fatal(err)
		}
		if len(name) != len("rwtest_")+12 || name[:7] != "rwtest_" {
			t.Errorf("database name %q, want rwtest_<12 hex>", name)
		}
	})
	conn, err := pgx.Connect(context.Background(), ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("database %s still exists after the test ended", name)
	}
}
