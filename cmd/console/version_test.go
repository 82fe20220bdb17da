package main

import (
	"testing"

	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
)

// version, -version and --version print the build this binary comes from.
func TestVersion(t *testing.T) { proctest.CheckVersion(t, "console") }
