package config

import (
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/internal/accesslog"
)

func TestLoadDetectorAccessLog(t *testing.T) {
	d, err := LoadDetector(mapEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	if d.AccessLogTopic != "" || d.AccessLogFields != accesslog.DefaultMapping() {
		t.Fatalf("defaults: topic %q, fields %+v; want none and the nginx recipe's", d.AccessLogTopic, d.AccessLogFields)
	}
	d, err = LoadDetector(mapEnv(map[string]string{
		"ACCESS_LOG_TOPIC": "nginx.access", "ACCESS_LOG_FIELDS": "user=remote_user, cost=bytes"}))
	if err != nil {
		t.Fatal(err)
	}
	want := accesslog.DefaultMapping()
	want.User, want.Cost = "remote_user", accesslog.CostFromBytes
	if d.AccessLogTopic != "nginx.access" || d.AccessLogFields != want {
		t.Fatalf("topic %q, fields %+v; want nginx.access, %+v", d.AccessLogTopic, d.AccessLogFields, want)
	}
}

// A bad mapping or topic stops the detector with one line naming the
// variable.
func TestLoadDetectorAccessLogErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"unknown key", map[string]string{"ACCESS_LOG_FIELDS": "addr=remote_addr"}, `ACCESS_LOG_FIELDS: unknown key "addr"`},
		{"required key off", map[string]string{"ACCESS_LOG_FIELDS": "status="}, `ACCESS_LOG_FIELDS: key "status" needs a field`},
		{"the outcomes topic", map[string]string{"ACCESS_LOG_TOPIC": "ratelimit.outcomes"}, "ACCESS_LOG_TOPIC: \"ratelimit.outcomes\" is also OUTCOMES_TOPIC"},
		{"the decisions topic", map[string]string{"ACCESS_LOG_TOPIC": "d", "DECISIONS_TOPIC": "d"}, "ACCESS_LOG_TOPIC: \"d\" is also DECISIONS_TOPIC"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadDetector(mapEnv(tc.env))
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("error %v, want one line starting %q", err, tc.want)
			}
		})
	}
}
