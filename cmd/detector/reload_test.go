package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// syncBuffer is a log sink read while the detector writes it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// awaitLog waits until the log holds want.
func awaitLog(t *testing.T, log *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(log.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the log:\n%s", want, log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// SIGHUP makes the detector read its rules file at once (the poll is an
// hour away): a changed file is reloaded.
func TestSIGHUPReloadsRulesFile(t *testing.T) {
	broker := kafkatest.StartBroker(t, "decisions", "bans", "outcomes")
	prefix := redistest.Prefix(t, redistest.Client(t))
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	const rules = "rules: []\ndetection:\n  ban: [{violations: 3, within: 1m, duration: 1h}]\n"
	if err := os.WriteFile(rulesFile, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"KAFKA_BROKERS": broker.Addr(), "REDIS_URL": redistest.URL(), "REDIS_KEY_PREFIX": prefix,
		"LISTEN_ADDR": "127.0.0.1:0", "RULES_FILE": rulesFile, "DETECTOR_GROUP_ID": "detector-" + uuid.NewString(),
		"DECISIONS_TOPIC": "decisions", "BANS_TOPIC": "bans", "OUTCOMES_TOPIC": "outcomes", "RULES_POLL_INTERVAL": "1h",
	}
	log := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, nil, func(k string) string { return env[k] }, log) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	// run listens for SIGHUP before it assembles the detector, which
	// consumes only once assembled.
	awaitLog(t, log, "detector consuming")
	if strings.Contains(log.String(), "rules file reloaded") {
		t.Fatal("rules file reloaded before it changed")
	}
	if err := os.WriteFile(rulesFile, []byte(strings.Replace(rules, "violations: 3", "violations: 2", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	awaitLog(t, log, "rules file reloaded")
}
