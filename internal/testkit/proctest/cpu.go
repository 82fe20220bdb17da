package proctest

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// CPU returns the CPU time (user and system) process pid ("self" for this
// one) has used, or 0 for pid "". Linux counts it in ticks of 1/100 s.
func CPU(tb testing.TB, pid string) time.Duration {
	tb.Helper()
	if pid == "" {
		return 0
	}
	raw, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		tb.Fatal(err)
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: state is field 3, utime 14 and stime 15.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
