package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/detector"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/kafkabus"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/redisabuse"
	"github.com/ratewarden/ratewarden/internal/redisfleet"
	"github.com/ratewarden/ratewarden/internal/redisstore"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/bantest"
	"github.com/ratewarden/ratewarden/internal/testkit/eventschema"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
	"github.com/ratewarden/ratewarden/internal/testkit/limitertest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

const bansTopic = "ratelimit.bans"

// One rule per algorithm (two units each), a shadow rule, exemptions, and
// detection thresholds low enough for a few requests to cross them.
const schemaRules = `
rules:
  - id: fixed
    match: {endpoints: ["/api/fixed/**"]}
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 2, per: 1h}]
  - id: sliding
    match: {endpoints: ["/api/sliding/**"]}
    key: [ip]
    algorithm: sliding_window
    limits: [{requests: 2, per: 1h}]
  - id: counter
    match: {endpoints: ["/api/counter/**"]}
    key: [ip]
    algorithm: sliding_window_counter
    limits: [{requests: 2, per: 1h}]
  - id: bucket_1.x
    match: {endpoints: ["/api/bucket/**"]}
    key: [ip]
    algorithm: token_bucket
    limits: [{rate: 1, per: 1h, burst: 2}]
  - id: shadow-rule
    match: {endpoints: ["/api/shadow/**"]}
    key: [ip]
    algorithm: sliding_window
    limits: [{requests: 1, per: 1h}]
    shadow: true
exempt:
  tiers: [SUPER_ADMIN]
  ips: ["10.0.0.0/8"]
detection:
  warn: {violations: 2, within: 1m}
  ban:
    - {violations: 3, within: 1m, duration: 1h}
  scan: {distinct_endpoints: 4, within: 10s, duration: 30m}
  samples: 3
`

func compileSchema(t *testing.T, name string) *eventschema.Schema {
	t.Helper()
	s, err := eventschema.Compile("../../deploy/schemas/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// schemaStack is the test stack with what it lacks for bans: a limiter
// that enforces a ban set (it replaces the stack's, on the same Redis,
// rules and broker) and a publisher to the ban topic for the detector.
type schemaStack struct {
	*stack
	rules  *rules.Set
	bans   *limiter.BanSet
	banPub *kafkabus.BanPublisher
}

func newSchemaStack(t *testing.T) *schemaStack {
	t.Helper()
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t, rdb)
	broker := kafkatest.StartBroker(t, topic, bansTopic)
	banPub, err := kafkabus.NewBanPublisher(broker.Brokers(), bansTopic)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = banPub.Close() })
	ss := &schemaStack{banPub: banPub}
	ss.stack = newStack(t, stackOptions{rules: schemaRules, rdb: rdb, prefix: prefix, broker: broker,
		configure: func(cfg *stackConfig) {
			log, reg := zap.NewNop(), prometheus.NewRegistry()
			producer, err := kafkabus.NewProducer(kafkabus.ProducerConfig{Brokers: broker.Brokers(), Topic: topic}, log, reg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = producer.Close(ctx)
			})
			bans := limiter.NewBanSet(reg)
			ss.rules = cfg.Service.Rules()
			cfg.Service = limitertest.Service(t, redisstore.New(rdb), ss.rules, limitertest.Options{
				Limiter:  limiter.Config{Instance: "schema-test", Bans: bans},
				Coalesce: redisstore.CoalesceConfig{Timeout: 5 * time.Second},
				Events:   producer, Log: log, Registerer: reg,
			})
			ss.bans = bans
		}})
	return ss
}

// checkJSON posts the body built from fields and returns the decision.
func (s *schemaStack) checkJSON(fields map[string]any) response {
	s.t.Helper()
	body, err := json.Marshal(fields)
	if err != nil {
		s.t.Fatal(err)
	}
	r := s.check(string(body))
	if r.Status != http.StatusOK || r.EventID == "" {
		s.t.Fatalf("check %s: %+v", body, r)
	}
	return r
}

// recordingPublisher is the detector's real ban publisher, remembering what
// it published.
type recordingPublisher struct {
	pub  *kafkabus.BanPublisher
	bans []event.Ban
}

func (p *recordingPublisher) Publish(ctx context.Context, bans ...event.Ban) error {
	if err := p.pub.Publish(ctx, bans...); err != nil {
		return err
	}
	p.bans = append(p.bans, bans...)
	return nil
}

// Every event the services emit passes the schemas of deploy/schemas: the
// limiter's decisions (every reason and algorithm, shadow, forward-auth,
// hostile strings), and the bans and warnings the detector derives from
// those very decisions, enforced and dry run. (The admin API's bans and
// unbans: adminapi's TestSchemaAdminBans.)
func TestSchemaEmittedEvents(t *testing.T) {
	testkit.AvoidHourEnd(t) // each rule's third request must be its hour's third
	decisionSchema, banSchema := compileSchema(t, "decision.schema.json"), compileSchema(t, "ban.schema.json")
	s := newSchemaStack(t)
	const (
		attacker = "203.0.113.7"
		scanner  = "198.51.100.20"
		banned   = "198.51.100.9"
	)
	checks := 0
	check := func(fields map[string]any) response {
		t.Helper()
		checks++
		return s.checkJSON(fields)
	}
	// ok, then rate_limited, under every algorithm; the shadow rule reports
	// without denying.
	for _, path := range []string{"/api/fixed/a", "/api/sliding/b", "/api/counter/c", "/api/bucket/d"} {
		for i := range 3 {
			r := check(map[string]any{"ip": attacker, "endpoint": path, "user_id": "attacker-ü", "tier": "BASIC", "method": "post"})
			if want := i == 2; (r.Reason == "rate_limited") != want {
				t.Fatalf("%s #%d: %+v", path, i, r)
			}
		}
	}
	for i := range 2 {
		if r := check(map[string]any{"ip": attacker, "endpoint": "/api/shadow/x"}); !r.Allowed || r.Shadow != (i == 1) {
			t.Fatalf("shadow #%d: %+v", i, r)
		}
	}
	// exempt by tier and by IP, no_rule, and breadth for the scan detection.
	check(map[string]any{"ip": "203.0.113.8", "endpoint": "/api/fixed/a", "tier": "SUPER_ADMIN"})
	check(map[string]any{"ip": "10.1.2.3", "endpoint": "/api/fixed/a"})
	for i := range 5 {
		check(map[string]any{"ip": scanner, "endpoint": "/scan/" + string(rune('a'+i))})
	}
	// A scan spread over the addresses of one IPv6 /64: banned as the prefix.
	for i := range 5 {
		check(map[string]any{"ip": fmt.Sprintf("2001:db8:5ca::%x", i+1), "endpoint": "/scan/" + string(rune('a'+i))})
	}
	// Strings that need escaping or normalization on their way to the event.
	check(map[string]any{"ip": "::ffff:203.0.113.9", "endpoint": `/api//bucket/../fixed/b%C3%BCcher/世界?q="x"&y=<z>#frag`,
		"user_id": "\"quoted\" \\ <script>&amp; \u2028 ユーザー 🎉", "tier": "ÜBER\u00a0", "method": "M-SEARCH"})
	// (Control characters are refused at the API: see TestBadInput.)
	check(map[string]any{"ip": "2001:db8::1", "endpoint": "/raw%FF%22", "user_id": "\u2029\u00ad"})
	// Forward-auth: Traefik headers, and Envoy's path after /v1/auth.
	for _, call := range []struct {
		path   string
		header map[string]string
	}{
		{"/v1/auth", map[string]string{"X-Forwarded-Uri": "/api/sliding/z?x=1", "X-Forwarded-Method": "delete", "X-User-Id": "fa-user", "X-User-Tier": "VIP"}},
		{"/v1/auth/api/counter/%E2%9C%93", nil},
	} {
		checks++
		if r := s.do(http.MethodGet, call.path, "", call.header); r.Status != http.StatusOK || r.EventID == "" {
			t.Fatalf("auth %s: %+v", call.path, r)
		}
	}
	// Bans in force, as the admin API applies them to the limiter's ban
	// set (adminapi's tests), then requests they deny, then an unban.
	expires := time.Now().Add(time.Hour)
	s.bans.Apply(event.ActionBan, event.ScopeIP, banned, expires)
	s.bans.Apply(event.ActionBan, event.ScopeUser, s.rules.UserKey("mallory \"é\" 🎉"), expires)
	s.bans.Apply(event.ActionBan, event.ScopeIP, rules.IPSubject(netip.MustParseAddr("2001:db8:77::5"), 64), expires) // 2001:db8:77::/64
	if r := check(map[string]any{"ip": banned, "endpoint": "/api/fixed/a"}); r.Reason != "banned" {
		t.Fatalf("banned ip: %+v", r)
	}
	if r := check(map[string]any{"ip": "203.0.113.10", "endpoint": "/elsewhere", "user_id": "mallory \"é\" 🎉"}); r.Reason != "banned" {
		t.Fatalf("banned user: %+v", r)
	}
	if r := check(map[string]any{"ip": "2001:db8:77::ffff", "endpoint": "/api/fixed/a"}); r.Reason != "banned" {
		t.Fatalf("another address of the banned /64: %+v", r)
	}
	s.bans.Apply(event.ActionUnban, event.ScopeIP, banned, time.Time{})
	if r := check(map[string]any{"ip": banned, "endpoint": "/other"}); r.Reason != "no_rule" {
		t.Fatalf("after the unban: %+v", r)
	}

	decisions := kafkatest.ReadMessages(t, s.opts.broker.Brokers(), topic, checks, 30*time.Second)
	t.Run("decisions", func(t *testing.T) {
		reasons, algorithms, shadow := map[string]int{}, map[string]int{}, 0
		for _, m := range decisions {
			if err := decisionSchema.Validate(m.Value); err != nil {
				t.Errorf("%s\n%v", m.Value, err)
			}
			ev, err := event.DecodeDecision(m.Value)
			if err != nil {
				t.Fatal(err)
			}
			reasons[ev.Reason]++
			algorithms[ev.Algorithm]++
			if ev.Shadow {
				shadow++
			}
		}
		for _, r := range []string{"ok", "rate_limited", "banned", "exempt", "no_rule"} {
			if reasons[r] == 0 {
				t.Errorf("no %s decision among %v", r, reasons)
			}
		}
		for _, a := range []string{"fixed_window", "sliding_window", "sliding_window_counter", "token_bucket", ""} {
			if algorithms[a] == 0 {
				t.Errorf("no decision with algorithm %q among %v", a, algorithms)
			}
		}
		if shadow == 0 {
			t.Error("no shadow decision")
		}
		t.Logf("%d decisions checked: %v", len(decisions), reasons)
	})

	// The detector's path, as cmd/detector wires it (Redis windows and
	// ledger, Kafka ban publisher), over the decisions just read, once
	// enforcing and once in dry run, each on keys of its own.
	handed := make([]event.Message, len(decisions)) // as kafkabus.Consume hands them over
	for i, m := range decisions {
		handed[i] = event.Message{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Value: m.Value}
	}
	var detected []event.Ban
	for _, dryRun := range []bool{false, true} {
		rdb, _, _ := s.shared()
		prefix := redistest.Prefix(t, rdb)
		det := s.rules.Detection()
		det.DryRun = dryRun
		ledger := redisabuse.NewLedger(rdb, prefix, redisfleet.NewBlacklist(rdb, prefix))
		pub := &recordingPublisher{pub: s.banPub}
		engine := abuse.NewEngine(abuse.Config{
			Detection: det,
			Exempt: func(sub event.Subject) bool {
				req := rules.Request{UserID: sub.UserID, IP: sub.IP, Endpoint: sub.Endpoint, Method: sub.Method, Tier: sub.Tier}
				return s.rules.Exempt(&req)
			},
		}, redisabuse.NewWindows(rdb, prefix), ledger, pub)
		svc, err := detector.New(zap.NewNop(), prometheus.NewRegistry(),
			detector.Source{Name: detector.SourceDecisions, Pipeline: detector.DecisionPipeline(engine)})
		if err != nil {
			t.Fatal(err)
		}
		if err := svc.Consumers()[0].Handle(context.Background(), handed); err != nil {
			t.Fatalf("detector (dry run %v): %v", dryRun, err)
		}
		detected = append(detected, pub.bans...)
	}

	bans := kafkatest.ReadMessages(t, s.opts.broker.Brokers(), bansTopic, len(detected), 30*time.Second)
	t.Run("ban topic", func(t *testing.T) {
		if n := kafkatest.CountMessages(t, s.opts.broker.Brokers(), bansTopic); n != int64(len(detected)) {
			t.Errorf("%d messages on %s, want %d from the detector", n, bansTopic, len(detected))
		}
		seen := bantest.Kinds(t, banSchema, bans)
		for _, want := range []string{"detector ban ip", "detector ban user",
			"detector warn ip", "detector warn user", "reason scan", "reason violations_1m", "dry run",
			"detector ban ipv6 prefix"} {
			if seen[want] == 0 {
				t.Errorf("no %q among the ban messages: %v", want, seen)
			}
		}
		t.Logf("%d ban messages checked: %v", len(bans), seen)
	})
}
