package main

import (
	"testing"

	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
)

func TestMain(m *testing.M) { proctest.RunMainOr(m, main) }

// version, -version and --version print the build this binary comes from.
func TestVersion(t *testing.T) { proctest.CheckVersion(t, "loginsim") }
