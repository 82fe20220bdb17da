package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/kafkabus"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
)

// archiverEnv is an env with its own database.
func archiverEnv(t *testing.T) (*env, string) {
	t.Helper()
	e := newEnv(t)
	db := e.vars["DATABASE_URL"]
	e.vars["ARCHIVER_GROUP_ID"] = "archiver-" + fmt.Sprint(time.Now().UnixNano())
	e.vars["ARCHIVER_FLUSH_INTERVAL"] = "200ms"
	return e, db
}

// produce publishes raw values on topic and waits until all are acknowledged.
func produce(t *testing.T, e *env, topic string, values ...[]byte) {
	t.Helper()
	p, err := kafkabus.NewProducer(kafkabus.ProducerConfig{Brokers: e.broker.Brokers(), Topic: topic,
		QueueSize: len(values) + 1, MaxInFlight: len(values) + 1}, zap.NewNop(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range values {
		if !p.Publish([]byte("k"), v) {
			t.Fatal("event dropped")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// decisions returns n encoded decision events, one in every denyEvery denied.
func decisions(n, denyEvery int) [][]byte {
	out := make([][]byte, n)
	now := time.Now().UTC()
	for i := range out {
		ev := event.Decision{EventID: uuid.NewString(), TS: now.Add(time.Duration(i) * time.Millisecond), Instance: "e2e",
			UserID: fmt.Sprintf("u-%d", i%13), IP: fmt.Sprintf("192.0.2.%d", i%200+1), Endpoint: fmt.Sprintf("/api/x/%d", i%7),
			Method: "GET", Tier: "BASIC", RuleID: "api", Algorithm: "token_bucket", Allowed: true, Reason: event.ReasonOK,
			Limit: 10, Remaining: 3, Mode: "redis"}
		if i%denyEvery == 0 {
			ev.Allowed, ev.Reason, ev.Remaining, ev.RetryAfterMS = false, event.ReasonRateLimited, 0, 250
		}
		out[i] = ev.AppendJSON(nil)
	}
	return out
}

func count(t *testing.T, db, query string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(ctx, query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

const violations = "SELECT count(*) FROM rate_limit_violations"

// N violations produced give exactly N rows; producing the same messages
// again changes nothing.
func TestArchiverExactlyOnce(t *testing.T) {
	e, db := archiverEnv(t)
	msgs := decisions(1000, 2) // 500 violations, 500 allowed (not archived)
	produce(t, e, decisionsTopic, msgs...)
	archiver := e.start("archiver")
	testkit.WaitFor(t, 30*time.Second, "500 rows", func() bool { return count(t, db, violations) == 500 })
	produce(t, e, decisionsTopic, msgs...)
	testkit.WaitFor(t, 30*time.Second, "the redelivered violations to be skipped", func() bool {
		return archiver.metric(t, "rate_limit_archiver_duplicates_total") >= 500
	})
	if n := count(t, db, violations); n != 500 {
		t.Fatalf("%d rows after producing the same messages twice, want 500", n)
	}
}

// The archiver killed mid-stream and restarted: no loss, no duplicates.
// The restarted one gets the partition once the group has rebalanced
// without the dead members, and a rejoin can wait out kafka-go's 30 s
// rebalance timeout more than once: the wait is long, and how long
// recovery takes is logged, not asserted.
func TestArchiverKilledMidStream(t *testing.T) {
	t.Parallel() // it mostly waits; see the Makefile's unit target
	e, db := archiverEnv(t)
	const n = 20000
	produce(t, e, decisionsTopic, decisions(n, 1)...)
	first := e.start("archiver", "ARCHIVER_BATCH_SIZE", "100")
	testkit.WaitFor(t, 60*time.Second, "some rows", func() bool { return count(t, db, violations) >= 1000 })
	first.stop(syscall.SIGKILL)
	killedAt := count(t, db, violations)
	t.Logf("killed with %d of %d rows archived", killedAt, n)
	restarted := time.Now()
	e.start("archiver", "ARCHIVER_BATCH_SIZE", "100")
	testkit.WaitFor(t, 5*time.Minute, fmt.Sprintf("%d rows", n), func() bool { return count(t, db, violations) >= n })
	t.Logf("every row archived %v after the restart", time.Since(restarted).Round(time.Second))
	if got, distinct := count(t, db, violations), count(t, db, "SELECT count(DISTINCT event_id) FROM rate_limit_violations"); got != n || distinct != n {
		t.Fatalf("%d rows (%d distinct) after a SIGKILL, want exactly %d", got, distinct, n)
	}
}

// proxy forwards TCP to target and can cut every connection, as a network
// failure would.
type proxy struct {
	target, addr string
	mu           sync.Mutex
	ln           net.Listener
	conns        []net.Conn
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	p := &proxy{target: target, addr: proctest.FreeAddr(t)}
	p.restore(t)
	t.Cleanup(p.cut)
	return p
}

func (p *proxy) restore(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(u, c); u.Close() }()
			go func() { _, _ = io.Copy(c, u); c.Close() }()
		}
	}()
}

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// Postgres unreachable for a while: the archiver holds its offsets, retries,
// and loses nothing once it returns.
func TestArchiverSurvivesPostgresOutage(t *testing.T) {
	e, db := archiverEnv(t)
	cfg, err := pgx.ParseConfig(db)
	if err != nil {
		t.Fatal(err)
	}
	pg := startProxy(t, fmt.Sprintf("%s:%d", cfg.Host, cfg.Port))
	e.vars["DATABASE_URL"] = fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", cfg.User, pg.addr, cfg.Database)
	produce(t, e, decisionsTopic, decisions(3000, 1)...)
	archiver := e.start("archiver", "ARCHIVER_BATCH_SIZE", "100")
	testkit.WaitFor(t, 60*time.Second, "some rows", func() bool { return count(t, db, violations) > 0 })
	pg.cut()
	produce(t, e, decisionsTopic, decisions(3000, 1)...)
	testkit.WaitFor(t, 30*time.Second, "the archiver to notice", func() bool {
		return archiver.metric(t, "rate_limit_archiver_flush_failures_total") > 0
	})
	time.Sleep(2 * time.Second)
	pg.restore(t)
	testkit.WaitFor(t, 120*time.Second, "6000 rows", func() bool { return count(t, db, violations) >= 6000 })
	if n := count(t, db, violations); n != 6000 {
		t.Fatalf("%d rows after the outage, want exactly 6000", n)
	}
}

// A poison message becomes one dead-letter row; the rows around it are
// archived and the stream moves on.
func TestArchiverDeadLetters(t *testing.T) {
	e, db := archiverEnv(t)
	good := decisions(2, 1)
	bad := event.Decision{EventID: "not-a-uuid", TS: time.Now().UTC(), IP: "192.0.2.1", Endpoint: "/a", Reason: event.ReasonRateLimited}
	produce(t, e, decisionsTopic, good[0], []byte("{not json"), bad.AppendJSON(nil), good[1])
	ban, err := event.EncodeBan(event.Ban{BanID: uuid.NewString(), TS: time.Now().UTC(), Action: event.ActionBan, Scope: event.ScopeIP,
		Subject: "192.0.2.9", Reason: "scan", Count: 57, Threshold: 50, WindowS: 10, DurationS: 3600,
		ExpiresAt: time.Now().Add(time.Hour).UTC(), Source: "detector"})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, e, bansTopic, ban)
	e.start("archiver")
	testkit.WaitFor(t, 30*time.Second, "2 violations, 1 ban, 2 dead letters", func() bool {
		return count(t, db, violations) == 2 && count(t, db, "SELECT count(*) FROM bans") == 1 &&
			count(t, db, "SELECT count(*) FROM dead_letters") == 2
	})
}
