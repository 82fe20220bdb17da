package abusetest_test

import (
	"testing"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/testkit/abusetest"
)

func TestMemoryWindows(t *testing.T) {
	abusetest.RunWindows(t, func(*testing.T) abuse.Windows { return abusetest.NewMemoryWindows() })
}

func TestMemoryLedger(t *testing.T) {
	abusetest.RunLedger(t, func(*testing.T) abuse.Ledger { return abusetest.NewMemoryLedger() })
}

func TestMemoryDistinct(t *testing.T) {
	abusetest.RunDistinct(t, func(*testing.T) abuse.Distinct { return abusetest.NewMemoryDistinct() })
}
