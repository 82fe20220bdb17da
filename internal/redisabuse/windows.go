package redisabuse

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/redisstore"
	"github.com/ratewarden/ratewarden/lua"
)

// Windows is the detector's sliding windows in Redis (abuse.Windows), run
// by lua/detect_windows.lua: state survives a detector restart and is shared
// by every detector instance. It is safe for concurrent use.
//
// An offender's keys share the hash tag {det|<scope>|<hash>}, where <hash>
// is the first 32 hex digits of the SHA-256 of the subject, so each script
// touches a single Redis Cluster slot whatever the subject holds.
type Windows struct {
	client redis.UniversalClient
	prefix string
	script *redis.Script
}

// NewWindows returns the windows stored under the key prefix (which must not
// contain '{' or '}', as it precedes the hash tag).
func NewWindows(client redis.UniversalClient, prefix string) *Windows {
	return &Windows{client: client, prefix: prefix, script: redis.NewScript(lua.DetectWindows())}
}

// Record records the sightings in one round trip (a pipeline of one script
// call per sighting, in order) and returns their tallies, with the
// semantics of abusetest.MemoryWindows. Dropping events later than the grace is
// the caller's business.
func (w *Windows) Record(ctx context.Context, spec abuse.WindowSpec, sightings []abuse.Sighting) ([]abuse.Tally, error) {
	if len(sightings) == 0 {
		return nil, nil
	}
	if err := validateSpec(spec); err != nil {
		return nil, fmt.Errorf("redis record windows: %w", err)
	}
	calls := make([]redisstore.EvalCall, len(sightings))
	for i, s := range sightings {
		if err := validateScope(s.Offender.Scope); err != nil {
			return nil, fmt.Errorf("redis record windows: sighting %d: %w", i, err)
		}
		calls[i] = w.call(spec, s)
	}
	cmds := redisstore.EvalPipelined(ctx, w.client, calls)
	tallies := make([]abuse.Tally, len(cmds))
	for i, cmd := range cmds {
		t, err := parseTally(cmd, len(spec.Violations))
		if err != nil {
			return nil, fmt.Errorf("redis record windows: sighting %d (event %.64q): %w", i, sightings[i].EventID, err)
		}
		tallies[i] = t
	}
	return tallies, nil
}

func (w *Windows) call(spec abuse.WindowSpec, s abuse.Sighting) redisstore.EvalCall {
	tag := offenderTag(w.prefix, s.Offender)
	violation := int64(0)
	if s.Violation {
		violation = 1
	}
	args := make([]any, 0, 12+2*len(spec.Violations))
	args = append(args, s.TS.UnixMilli(), violation, s.EventID, s.Endpoint,
		spec.Grace.Milliseconds(), spec.Scan.Milliseconds(), spec.ScanCap, spec.MaxViolations,
		int64(spec.Samples), windowsTTL(spec).Milliseconds(), spec.ScanThreshold, int64(len(spec.Violations)))
	for _, v := range spec.Violations {
		args = append(args, v.Milliseconds())
	}
	for i := range spec.Violations {
		args = append(args, spec.ViolationThreshold(i))
	}
	return redisstore.EvalCall{Script: w.script, Keys: []string{tag + ":v", tag + ":e", tag + ":n", tag + liftedSuffix}, Args: args}
}

// windowsTTL is how long an offender's windows outlive its last sighting:
// twice the largest window plus the grace, for slack.
func windowsTTL(spec abuse.WindowSpec) time.Duration {
	longest := spec.Scan
	for _, v := range spec.Violations {
		longest = max(longest, v)
	}
	return max(2*(longest+spec.Grace), time.Second)
}

func validateSpec(spec abuse.WindowSpec) error {
	if spec.Scan < 0 || spec.Grace < 0 || spec.Samples < 0 {
		return fmt.Errorf("window spec: negative scan, grace or samples")
	}
	for _, v := range spec.Violations {
		if v <= 0 {
			return fmt.Errorf("window spec: violation window %v is not positive", v)
		}
	}
	if len(spec.ViolationThresholds) > len(spec.Violations) {
		return fmt.Errorf("window spec: %d violation thresholds for %d windows", len(spec.ViolationThresholds), len(spec.Violations))
	}
	return nil
}

// parseTally reads the reply of detect_windows.lua.
func parseTally(cmd *redis.Cmd, windows int) (abuse.Tally, error) {
	v, err := cmd.Result()
	if err != nil {
		return abuse.Tally{}, err
	}
	vals, ok := v.([]any)
	if !ok || len(vals) < 6 {
		return abuse.Tally{}, errReply
	}
	// newest, endpoints, first and last endpoint, W, then when W >= 0 the
	// last violation and W pairs, then S.
	head := 6
	if w, ok := vals[4].(int64); ok && w >= 0 {
		if w != int64(windows) {
			return abuse.Tally{}, errReply
		}
		head += 1 + 2*windows
	}
	if len(vals) < head {
		return abuse.Tally{}, errReply
	}
	n := make([]int64, head)
	for i := range n {
		if n[i], ok = vals[i].(int64); !ok {
			return abuse.Tally{}, errReply
		}
	}
	t := abuse.Tally{
		Newest:        msTime(n[0]),
		Endpoints:     n[1],
		FirstEndpoint: msTime(n[2]),
		LastEndpoint:  msTime(n[3]),
	}
	if n[4] >= 0 {
		t.LastViolation = msTime(n[5])
		t.Violations = make([]int64, windows)
		t.FirstViolation = make([]time.Time, windows)
		for i := range windows {
			t.Violations[i] = n[6+2*i]
			t.FirstViolation[i] = msTime(n[7+2*i])
		}
	}
	samples := vals[head:]
	if int64(len(samples)) != n[head-1] {
		return abuse.Tally{}, errReply
	}
	if len(samples) > 0 {
		t.SampleEndpoints = make([]string, len(samples))
	}
	for i, s := range samples {
		if t.SampleEndpoints[i], ok = s.(string); !ok {
			return abuse.Tally{}, errReply
		}
	}
	return t, nil
}

// msTime converts a script's ms to a UTC time, 0 to the zero time.
func msTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}
