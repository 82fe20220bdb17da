package e2e

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/kafkabus"
	"github.com/ratewarden/ratewarden/internal/redisfleet"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
	"github.com/ratewarden/ratewarden/internal/testkit/pgtest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

const (
	// streamPartitions is the partition count of both topics: enough for two
	// detectors and the six decisions consumers of two archivers.
	streamPartitions  = 12
	archiverConsumers = 3 // decisions consumers per archiver (ARCHIVER_CONSUMERS)
	detectorGroup     = "consumers-detector"
	archiverGroup     = "consumers-archiver"
	// The thresholds the stream is built around (see newStream).
	consumersRulesYAML = `
rules:
  - id: api
    match: {endpoints: ["/api/**"]}
    key: [ip]
    algorithm: token_bucket
    limits: [{rate: 1000, per: 1s, burst: 1000}]
detection:
  warn: {violations: 20, within: 5m}
  ban: [{violations: 40, within: 5m, duration: 1h}]
  scan: {distinct_endpoints: 30, within: 10s, duration: 1h}
`
)

// The clients of the stream. Normal clients stay below every threshold;
// each abuser crosses its thresholds once, in event time.
const (
	normalClients = 300 // 40 requests over 8 endpoints; 19 denied (half of them) or at most 10
	scanners      = 20  // 40 distinct endpoints in 4 s: a scan ban
	bruteForcers  = 15  // 45 denials in 45 s: a warning at 20, a ban at 40
	nuisances     = 10  // 25 denials in 25 s: a warning
	streamSpan    = 2 * time.Minute
	streamChunks  = 24 // the stream is produced in this many pieces
)

// banKey is what one ban or warning is about. A detection crossed once must
// give one ban id per key, however often its events are redelivered.
type banKey struct{ action, scope, subject, reason string }

// keyOf returns what b is about.
func keyOf(b event.Ban) banKey { return banKey{b.Action, b.Scope, b.Subject, b.Reason} }

// stream is a deterministic decision stream (only its times move with the
// base) and what detecting and archiving it must give.
type stream struct {
	events       []event.Decision // in event-time order
	bans         map[banKey]bool  // every ban and warning, nothing else
	violations   int              // denied events: one archived row each
	perPartition map[int]int64    // events per decisions partition
}

// newStream builds the stream of the consumers test from base on.
func newStream(base time.Time) stream {
	rng := rand.New(rand.NewPCG(7, 11))
	ids := rand.NewChaCha8([32]byte{7}) // event ids: valid UUIDs, same every run
	s := stream{bans: map[banKey]bool{}, perPartition: map[int]int64{}}
	add := func(ip string, at time.Duration, endpoint string, denied bool) {
		ev := event.Decision{EventID: uuid.Must(uuid.NewRandomFromReader(ids)).String(), TS: base.Add(at), Instance: "e2e",
			IP: ip, Endpoint: endpoint, Method: "GET", Tier: "BASIC", RuleID: "api", Algorithm: "token_bucket",
			Allowed: true, Reason: event.ReasonOK, Limit: 1000, Remaining: 500, Mode: "redis"}
		if denied {
			ev.Allowed, ev.Reason, ev.Remaining, ev.RetryAfterMS = false, event.ReasonRateLimited, 0, 250
			s.violations++
		}
		s.events = append(s.events, ev)
		s.perPartition[partitionOf(ip)]++
	}
	within := func(span time.Duration) time.Duration {
		return time.Duration(rng.Int64N(int64(span/time.Millisecond))) * time.Millisecond
	}
	for i := range normalClients {
		ip := fmt.Sprintf("100.64.%d.%d", i/250, i%250+1)
		denied := rng.IntN(11)
		if i%2 == 0 {
			denied = 19 // one short of a warning: a violation counted twice shows
		}
		for j := range 40 {
			add(ip, within(streamSpan), fmt.Sprintf("/api/books/%d", rng.IntN(8)), j < denied)
		}
	}
	denials := func(ip string, n int) {
		start := within(streamSpan - time.Duration(n)*time.Second)
		for j := range n {
			add(ip, start+time.Duration(j)*time.Second, "/api/login", true)
		}
	}
	for i, ip := range abuserIPs(scanners + bruteForcers + nuisances) {
		switch {
		case i < scanners:
			start := within(streamSpan - 4*time.Second)
			for j := range 40 {
				add(ip, start+time.Duration(j)*100*time.Millisecond, fmt.Sprintf("/api/scan/%d", j), false)
			}
			s.bans[banKey{event.ActionBan, event.ScopeIP, ip, "scan"}] = true
		case i < scanners+bruteForcers:
			denials(ip, 45)
			s.bans[banKey{event.ActionWarn, event.ScopeIP, ip, "violations_5m"}] = true
			s.bans[banKey{event.ActionBan, event.ScopeIP, ip, "violations_5m"}] = true
		default:
			denials(ip, 25)
			s.bans[banKey{event.ActionWarn, event.ScopeIP, ip, "violations_5m"}] = true
		}
	}
	slices.SortStableFunc(s.events, func(a, b event.Decision) int { return a.TS.Compare(b.TS) })
	return s
}

// abuserIPs returns n client IPs dealt round-robin over the partitions, so
// that every partition, whichever consumer holds it when, carries abusers
// of every kind.
func abuserIPs(n int) []string {
	perPartition := (n + streamPartitions - 1) / streamPartitions
	byPartition := make([][]string, streamPartitions)
	for i, full := 0, 0; full < streamPartitions; i++ {
		ip := fmt.Sprintf("198.18.%d.%d", i/250, i%250+1)
		if p := partitionOf(ip); len(byPartition[p]) < perPartition {
			byPartition[p] = append(byPartition[p], ip)
			if len(byPartition[p]) == perPartition {
				full++
			}
		}
	}
	out := make([]string, n)
	for i := range out {
		out[i] = byPartition[i%streamPartitions][i/streamPartitions]
	}
	return out
}

// partitionOf is the decisions partition of a client's events: the limiter's
// producer keys them by IP with kafka-go's Murmur2 balancer.
func partitionOf(ip string) int {
	parts := make([]int, streamPartitions)
	for i := range parts {
		parts[i] = i
	}
	return kafka.Murmur2Balancer{}.Balance(kafka.Message{Key: []byte(ip)}, parts...)
}

// produceByIP publishes events on the decisions topic keyed by client IP,
// as the limiter does, and waits until all are acknowledged.
func produceByIP(t *testing.T, e *env, events []event.Decision) {
	t.Helper()
	p, err := kafkabus.NewProducer(kafkabus.ProducerConfig{Brokers: e.broker.Brokers(), Topic: decisionsTopic,
		QueueSize: len(events) + 1, MaxInFlight: len(events) + 1}, zap.NewNop(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for i := range events {
		if !p.Publish([]byte(events[i].IP), events[i].AppendJSON(nil)) {
			t.Fatal("event dropped")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// consumersEnv is an env whose topics have streamPartitions partitions,
// with the thresholds of consumersRulesYAML, its own database, and small
// batches so that a kill finds work in flight.
func consumersEnv(t *testing.T) (*env, string) {
	t.Helper()
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte(consumersRulesYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	broker := kafkatest.StartBrokerPartitions(t, streamPartitions, decisionsTopic, bansTopic, outcomesTopic)
	db := pgtest.Database(t)
	return &env{t: t, broker: broker, vars: map[string]string{
		"KAFKA_BROKERS":           broker.Addr(),
		"REDIS_URL":               redistest.RequiredURL(t),
		"REDIS_KEY_PREFIX":        redistest.Prefix(t, redistest.Client(t)),
		"RULES_FILE":              rules,
		"DATABASE_URL":            db,
		"DETECTOR_GROUP_ID":       detectorGroup,
		"DETECTOR_BATCH_SIZE":     "100",
		"ARCHIVER_GROUP_ID":       archiverGroup,
		"ARCHIVER_CONSUMERS":      fmt.Sprint(archiverConsumers),
		"ARCHIVER_BATCH_SIZE":     "200",
		"ARCHIVER_FLUSH_INTERVAL": "200ms",
	}}, db
}

// waitSplit waits until group is stable with exactly members consumers of
// topic, each holding some of its partitions and all of them held, and
// returns the partitions of each member.
func waitSplit(t *testing.T, e *env, group, topic string, members int) map[string][]int {
	t.Helper()
	var split map[string][]int
	testkit.WaitFor(t, 45*time.Second, fmt.Sprintf("%s to split %s between %d members", group, topic, members), func() bool {
		var state string
		state, split = kafkatest.GroupAssignment(t, e.broker.Brokers(), group, topic)
		held := 0
		for _, parts := range split {
			if len(parts) == 0 {
				return false
			}
			held += len(parts)
		}
		return state == "Stable" && len(split) == members && held == streamPartitions
	})
	return split
}

// describeSplit writes a split as "[0 1] [2 3]", members in partition order.
func describeSplit(split map[string][]int) string {
	parts := slices.Collect(maps.Values(split))
	slices.SortFunc(parts, func(a, b []int) int { return a[0] - b[0] })
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = fmt.Sprint(p)
	}
	return strings.Join(out, " ")
}

// takenOver returns the partitions of the members of before that are gone
// from after: those of the killed process.
func takenOver(before, after map[string][]int) []int {
	var out []int
	for member, parts := range before {
		if _, ok := after[member]; !ok {
			out = append(out, parts...)
		}
	}
	slices.Sort(out)
	return out
}

// lockTable locks table in database db so that every writer of it waits
// inside its transaction, until the returned function (or the end of the
// test) releases it.
func lockTable(t *testing.T, db, table string) (unlock func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err == nil {
		_, err = tx.Exec(ctx, "LOCK TABLE "+pgx.Identifier{table}.Sanitize()+" IN SHARE ROW EXCLUSIVE MODE")
	}
	if err != nil {
		conn.Close(ctx)
		t.Fatalf("lock %s: %v", table, err)
	}
	var once sync.Once
	unlock = func() { once.Do(func() { conn.Close(ctx) }) } // closing rolls back
	t.Cleanup(unlock)
	return unlock
}

// uncommitted returns how many messages of the partitions parts lie past
// the committed offsets.
func uncommitted(ends, committed map[int]int64, parts []int) int64 {
	var n int64
	for _, p := range parts {
		n += ends[p] - max(committed[p], 0)
	}
	return n
}

// waitDrained waits until group has committed the end of every partition of
// topic that has messages: every message handled, by whichever member held
// it.
func waitDrained(t *testing.T, e *env, group, topic string, timeout time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(100 * time.Millisecond) {
		ends := kafkatest.EndOffsets(t, e.broker.Brokers(), topic)
		committed := kafkatest.CommittedOffsets(t, e.broker.Brokers(), group, topic)
		if maps.EqualFunc(committed, ends, func(c, end int64) bool { return c == end || end == 0 }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has not committed the end of %s after %v: committed %v, end %v", group, topic, timeout, committed, ends)
		}
	}
}

// Two detectors and two archivers split the 12 partitions of the decisions
// topic in their consumer groups; one of each is killed (SIGKILL) mid-stream
// and the survivors take its partitions over from the last committed
// offsets, so part of the stream is handled twice. Still every abuser is
// warned or banned under exactly one ban id, nobody else is, every ban is on
// the blacklist, and every violation and every ban id is one row in
// Postgres.
func TestConsumersShareAndSurviveAKill(t *testing.T) {
	t.Parallel() // it mostly waits; see the Makefile's unit target
	began := time.Now()
	e, db := consumersEnv(t)
	// The stream ends now: a stream stamped ahead of the detector's clock by
	// more than detection.max_clock_skew is what a limiter whose clock
	// jumped sends, and would be decided at the detector's time.
	s := newStream(time.Now().UTC().Add(-streamSpan).Truncate(time.Millisecond))

	detectors := []*proc{e.start("detector"), e.start("detector")}
	archivers := []*proc{e.start("archiver"), e.start("archiver")}
	detSplit := waitSplit(t, e, detectorGroup, decisionsTopic, len(detectors))
	arcSplit := waitSplit(t, e, archiverGroup, decisionsTopic, len(archivers)*archiverConsumers)
	waitSplit(t, e, archiverGroup, bansTopic, len(archivers))
	t.Logf("decisions partitions of the 2 detectors: %s; of the 2×%d archiver consumers: %s (after %v)",
		describeSplit(detSplit), archiverConsumers, describeSplit(arcSplit), time.Since(began).Round(time.Millisecond))

	// A quarter of the stream; then the second and third quarters, during
	// which the victims are killed once they have handled some of them;
	// then the last quarter while their partitions wait for their sessions
	// to expire.
	chunks := slices.Collect(slices.Chunk(s.events, (len(s.events)+streamChunks-1)/streamChunks))
	quarter, threeQuarters := len(chunks)/4, len(chunks)*3/4
	for _, c := range chunks[:quarter] {
		produceByIP(t, e, c)
	}
	const archived = `rate_limit_archiver_rows_inserted_total{table="rate_limit_violations"}`
	testkit.WaitFor(t, 30*time.Second, "every detector and archiver to handle some of the stream", func() bool {
		for _, d := range detectors {
			if d.metric(t, "rate_limit_detector_events_total", `source="decisions"`) == 0 {
				return false
			}
		}
		for _, a := range archivers {
			if a.metric(t, archived) == 0 {
				return false
			}
		}
		return true
	})

	// From here until the kills, each victim is made to die in the middle
	// of its work. The broker refuses the detectors' commits, so what the
	// victim detector handles stays uncommitted and the survivor handles it
	// again: anything counted twice would show. And the violations table is
	// locked, so every archiver consumer waits inside its transaction: one
	// that had committed its offsets before writing would lose its batch.
	restoreCommits := e.broker.FailCommits(detectorGroup)
	unlock := lockTable(t, db, "rate_limit_violations")
	victimDet, victimArc := detectors[0], archivers[0]
	detBefore := victimDet.metric(t, "rate_limit_detector_events_total", `source="decisions"`)
	var detHandled float64
	killDetector := func() bool {
		if detHandled == 0 {
			if n := victimDet.metric(t, "rate_limit_detector_events_total", `source="decisions"`) - detBefore; n >= 200 {
				victimDet.stop(syscall.SIGKILL)
				detHandled = n
			}
		}
		return detHandled > 0
	}
	for _, c := range chunks[quarter:threeQuarters] {
		produceByIP(t, e, c)
		killDetector()
	}
	testkit.WaitFor(t, 30*time.Second, "the victim detector to handle some of the middle quarters", killDetector)
	const lockWaiters = `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`
	testkit.WaitFor(t, 30*time.Second, "every decisions consumer of the archivers to wait on the lock", func() bool {
		return count(t, db, lockWaiters) >= len(archivers)*archiverConsumers
	})
	victimArc.stop(syscall.SIGKILL)
	killedAt := time.Now()
	unlock()
	restoreCommits()
	// The victims commit nothing more, and the survivors get none of their
	// partitions before the victims' sessions expire: what is left on those
	// partitions now is what the survivors take over.
	endsAtKill := kafkatest.EndOffsets(t, e.broker.Brokers(), decisionsTopic)
	detCommitted := kafkatest.CommittedOffsets(t, e.broker.Brokers(), detectorGroup, decisionsTopic)
	arcCommitted := kafkatest.CommittedOffsets(t, e.broker.Brokers(), archiverGroup, decisionsTopic)
	for _, c := range chunks[threeQuarters:] {
		produceByIP(t, e, c)
		time.Sleep(100 * time.Millisecond)
	}

	detAfter := waitSplit(t, e, detectorGroup, decisionsTopic, len(detectors)-1)
	arcAfter := waitSplit(t, e, archiverGroup, decisionsTopic, (len(archivers)-1)*archiverConsumers)
	waitSplit(t, e, archiverGroup, bansTopic, len(archivers)-1)
	detMoved, arcMoved := takenOver(detSplit, detAfter), takenOver(arcSplit, arcAfter)
	t.Logf("%v after the kills the survivors held the victims' partitions: detector %v with %d events left uncommitted, "+
		"%v of which it had handled; archiver %v with %d, killed with %d transactions waiting on the lock",
		time.Since(killedAt).Round(time.Millisecond), detMoved, uncommitted(endsAtKill, detCommitted, detMoved), detHandled,
		arcMoved, uncommitted(endsAtKill, arcCommitted, arcMoved), archiverConsumers)

	waitDrained(t, e, detectorGroup, decisionsTopic, 45*time.Second)
	waitDrained(t, e, archiverGroup, decisionsTopic, 30*time.Second)
	waitDrained(t, e, archiverGroup, bansTopic, 30*time.Second)
	t.Logf("drained %v after the kills; the surviving archiver skipped %v rows already archived (redelivered)",
		time.Since(killedAt).Round(time.Millisecond), archivers[1].metric(t, "rate_limit_archiver_duplicates_total"))

	// The stream reached the partitions newStream computed: every one of
	// them carries abusers.
	ends := kafkatest.EndOffsets(t, e.broker.Brokers(), decisionsTopic)
	if !maps.Equal(ends, s.perPartition) {
		t.Fatalf("events per partition %v, want %v (the Murmur2 placement of their IPs)", ends, s.perPartition)
	}

	issued := checkBanTopic(t, e, s)
	checkArchive(t, db, s, issued)
	checkBlacklist(t, e, issued)
}

// checkBanTopic checks that the ban topic holds exactly the stream's bans
// and warnings, one ban id each, and returns them by id.
func checkBanTopic(t *testing.T, e *env, s stream) map[string]event.Ban {
	t.Helper()
	n := kafkatest.CountMessages(t, e.broker.Brokers(), bansTopic)
	issued := map[string]event.Ban{}
	ids := map[banKey][]string{}
	for _, m := range kafkatest.ReadMessages(t, e.broker.Brokers(), bansTopic, int(n), 15*time.Second) {
		b, err := event.DecodeBan(m.Value)
		if err != nil {
			t.Fatalf("ban message %s: %v", m.Value, err)
		}
		if string(m.Key) != b.Key() {
			t.Errorf("ban message key %q, want %q", m.Key, b.Key())
		}
		if first, ok := issued[b.BanID]; ok {
			// A ban published again (its detector died between publishing
			// and settling it, or two detectors handled its events around
			// a rebalance) carries the same id, by which the archiver and
			// the security team deduplicate: the design allows it. The same
			// id about something else would be a bug.
			if keyOf(first) != keyOf(b) {
				t.Errorf("ban id %s used for %+v and %+v", b.BanID, keyOf(first), keyOf(b))
			}
			continue
		}
		issued[b.BanID] = b
		ids[keyOf(b)] = append(ids[keyOf(b)], b.BanID)
	}
	for k, list := range ids {
		switch {
		case !s.bans[k]:
			t.Errorf("unexpected %s of %s for %s (ids %v)", k.action, k.subject, k.reason, list)
		case len(list) > 1:
			t.Errorf("%s of %s for %s issued under %d ban ids %v, want one", k.action, k.subject, k.reason, len(list), list)
		}
	}
	for k := range s.bans {
		if ids[k] == nil {
			t.Errorf("missing %s of %s for %s", k.action, k.subject, k.reason)
		}
	}
	t.Logf("ban topic: %d messages, %d ban ids (%d expected), %d duplicates by ban id", n, len(issued), len(s.bans), n-int64(len(issued)))
	return issued
}

// checkArchive checks that Postgres holds one row per violation of the
// stream and one row per ban id issued.
func checkArchive(t *testing.T, db string, s stream, issued map[string]event.Ban) {
	t.Helper()
	if rows, distinct := count(t, db, violations), count(t, db, "SELECT count(DISTINCT event_id) FROM rate_limit_violations"); rows != s.violations || distinct != s.violations {
		t.Errorf("%d violation rows (%d distinct event ids), want exactly %d", rows, distinct, s.violations)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, "SELECT ban_id FROM bans")
	if err != nil {
		t.Fatal(err)
	}
	archived, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(archived)
	if want := slices.Sorted(maps.Keys(issued)); !slices.Equal(archived, want) {
		t.Errorf("bans table holds %d rows %v, want the %d ban ids issued %v", len(archived), archived, len(want), want)
	}
}

// checkBlacklist checks that every ban issued, and nothing else, is on the
// blacklist the limiters enforce, under the id it was issued with.
func checkBlacklist(t *testing.T, e *env, issued map[string]event.Ban) {
	t.Helper()
	active, err := redisfleet.NewBlacklist(redistest.Client(t), e.vars["REDIS_KEY_PREFIX"]).Active(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, b := range active {
		got[b.Subject] = b.BanID
	}
	want := map[string]string{}
	for id, b := range issued {
		if b.Action == event.ActionBan {
			want[b.Subject] = id
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("blacklist (subject: ban id) %v, want %v", got, want)
	}
}
