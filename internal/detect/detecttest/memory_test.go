package detecttest_test

import (
	"testing"

	"github.com/ratewarden/ratewarden/internal/detect"
	"github.com/ratewarden/ratewarden/internal/detect/detecttest"
)

func TestMemoryWindows(t *testing.T) {
	detecttest.RunWindows(t, func(*testing.T) detect.Windows { return detecttest.NewMemoryWindows() })
}

func TestMemoryLedger(t *testing.T) {
	detecttest.RunLedger(t, func(*testing.T) detect.Ledger { return detecttest.NewMemoryLedger() })
}
