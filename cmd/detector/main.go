// Command detector consumes the decision stream, finds abusive clients and
// bans them: Redis blacklist entries the limiters enforce, and messages on
// the ban topic for the security team.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/accesslog"
	"github.com/ratewarden/ratewarden/internal/buildinfo"
	"github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/detector"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/kafkabus"
	"github.com/ratewarden/ratewarden/internal/lifecycle"
	"github.com/ratewarden/ratewarden/internal/ops"
	"github.com/ratewarden/ratewarden/internal/redisabuse"
	"github.com/ratewarden/ratewarden/internal/redisfleet"
	"github.com/ratewarden/ratewarden/internal/redisstore"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/telemetry"
)

// usage heads the detector's -help; the variables follow it.
const usage = `Usage: detector [help | version]

Consumes the decisions and the outcomes (and a gateway's access log) and
bans abusive clients. The environment variables below configure it;
version (also -version) prints the build, and help (also -h, -help) this
text.
`

func main() {
	if buildinfo.Handle(os.Args[1:], os.Stdout, "detector") {
		return
	}
	if config.Help(os.Args[1:], os.Stdout, config.DetectorProcess, usage) {
		return
	}
	lifecycle.Main("detector", run)
}

// run wires the detector and consumes until ctx is cancelled; the batch in
// hand is finished (or left uncommitted) before it returns.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected arguments %q: configuration comes from the environment (see detector -help)", args)
	}
	cfg, err := config.LoadDetector(getenv)
	if err != nil {
		return err
	}
	log, err := telemetry.NewLogger(stderr, "detector", cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	set, err := rules.LoadSet(cfg.RulesFile, rules.Options{KeyPrefix: cfg.RedisKeyPrefix, CaseSensitiveUserIDs: cfg.CaseSensitiveUserIDs})
	if err != nil {
		return err
	}
	reg := telemetry.NewRegistry()

	redisstore.RouteLogs(log.Named("redis"))
	// Detection batches are pipelined and not on a request path: a longer
	// timeout than the limiter's suits them.
	redisCfg := redisstore.ClientConfig{URL: cfg.RedisURL, ClusterAddrs: cfg.RedisClusterAddrs, SentinelAddrs: cfg.RedisSentinelAddrs,
		SentinelMaster: cfg.RedisSentinelMaster, Timeout: max(cfg.RedisTimeout, 2*time.Second)}
	rdb, err := redisstore.Connect(redisCfg)
	if err != nil {
		return err
	}
	publisher, err := kafkabus.NewBanPublisher(cfg.KafkaBrokers, cfg.BansTopic)
	if err != nil {
		_ = rdb.Close()
		return err
	}

	blacklist := redisfleet.NewBlacklist(rdb, cfg.RedisKeyPrefix)
	ledger := redisabuse.NewLedger(rdb, cfg.RedisKeyPrefix, blacklist)

	engine := abuse.NewEngine(abuse.Config{
		Detection: set.Detection(),
		Exempt:    exempt(set.Exempt),
		UserKey:   set.UserKey,
	}, redisabuse.NewWindows(rdb, cfg.RedisKeyPrefix), ledger, publisher)
	outcomeEngine, err := abuse.NewOutcomeEngine(abuse.OutcomeConfig{
		Detection:  set.Detection(),
		Exempt:     exempt(set.ExemptRequest),
		ExemptUser: exempt(set.ExemptUser),
		UserKey:    set.UserKey,
	}, redisabuse.NewDistinct(rdb, cfg.RedisKeyPrefix), ledger, publisher)
	if err != nil {
		_ = publisher.Close()
		_ = rdb.Close()
		return err
	}
	// Each source reads in a consumer group of its own (see
	// detector.OutcomesGroupSuffix): a rebalance of one loop never stops
	// another. The outcome reports and the access log share one engine,
	// which keeps their topics' partitions apart.
	sources := []detector.Source{
		{Name: detector.SourceDecisions, Topic: cfg.DecisionsTopic, Group: cfg.GroupID, Pipeline: detector.DecisionPipeline(engine)},
		{Name: detector.SourceOutcomes, Topic: cfg.OutcomesTopic, Group: cfg.GroupID + detector.OutcomesGroupSuffix,
			Pipeline: detector.OutcomePipeline(outcomeEngine, detector.DecodeOutcomeMessage, nil)},
	}
	if cfg.AccessLogTopic != "" {
		sources = append(sources, detector.Source{Name: detector.SourceAccessLog, Topic: cfg.AccessLogTopic, Group: cfg.GroupID + accessLogGroupSuffix,
			Pipeline: detector.OutcomePipeline(outcomeEngine, accessLogDecoder(cfg.AccessLogFields),
				detector.BlacklistMarker(blacklist, set.Detection().IPv6Prefix, set.UserKey))})
	}
	svc, err := detector.New(log, reg, sources...)
	if err != nil {
		_ = publisher.Close()
		_ = rdb.Close()
		return err
	}

	opsListener := &ops.Listener{Var: "LISTEN_ADDR", Addr: cfg.ListenAddr, Log: log, Handler: ops.NewHandler(ops.Config{
		Metrics: telemetry.MetricsHandler(reg),
		Probes: []ops.Probe{
			{Name: "redis", Required: true, Check: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }},
			{Name: "kafka", Required: true, Check: func(ctx context.Context) error { return kafkabus.Ping(ctx, cfg.KafkaBrokers) }},
		},
		Log: log,
	})}
	g := lifecycle.New(log, cfg.ShutdownTimeout)
	g.Add(
		lifecycle.Part{Name: "redis", Stop: func(context.Context) error { return rdb.Close() }},
		lifecycle.Part{Name: "ban publisher", Stop: func(context.Context) error { return publisher.Close() }},
		lifecycle.Part{Name: "ops listener", Start: opsListener.Listen, Run: opsListener.Serve, Stop: opsListener.Shutdown},
	)
	// What each source's start line says besides its topic and group.
	startFields := map[string][]zap.Field{
		detector.SourceDecisions: {zap.String("redis", redisCfg.Target()), zap.Strings("kafka", cfg.KafkaBrokers),
			zap.Bool("dry_run", set.Detection().DryRun), zap.Duration("max_clock_skew", engine.MaxClockSkew()),
			zap.Bool("user_ids_case_sensitive", cfg.CaseSensitiveUserIDs)},
		detector.SourceOutcomes:  {zap.Strings("scenarios", outcomeEngine.BanReasons())},
		detector.SourceAccessLog: {zap.String("fields", cfg.AccessLogFields.String())},
	}
	for _, c := range svc.Consumers() {
		src := c.Source()
		g.Add(lifecycle.Part{Name: src.Name + " consumer",
			Start: func(context.Context) error {
				log.Info("detector consuming", append([]zap.Field{zap.String("source", src.Name), zap.String("addr", opsListener.Address()),
					zap.String("topic", src.Topic), zap.String("group", src.Group)}, startFields[src.Name]...)...)
				return nil
			},
			Run: func(ctx context.Context) error {
				return consume(ctx, kafkabus.ConsumerConfig{
					Brokers: cfg.KafkaBrokers, Topic: src.Topic, GroupID: src.Group,
					BatchSize: cfg.BatchSize, BatchWait: cfg.BatchWait, OnStats: c.ReportStats,
				}, log.Named("consumer").With(zap.String("source", src.Name)), c.Handle)
			}})
	}
	return g.Run(ctx)
}

// consume consumes cfg.Topic once it exists, warning while it does not (a
// group reader that joins before its topic exists never gets its
// partitions): the access-log topic, for one, may be created after the
// detector starts.
func consume(ctx context.Context, cfg kafkabus.ConsumerConfig, log *zap.Logger, handle func(context.Context, []event.Message) error) error {
	if !kafkabus.AwaitTopic(ctx, cfg.Brokers, cfg.Topic, kafkabus.TopicPoll, log) {
		return nil
	}
	return kafkabus.Consume(ctx, cfg, log, handle)
}

// exempt returns an exemption of the rules file (rules.Set.Exempt,
// ExemptRequest or ExemptUser) as the engines ask it: of the subject of a
// decision event or an outcome.
func exempt(test func(*rules.Request) bool) func(event.Subject) bool {
	return func(s event.Subject) bool {
		return test(&rules.Request{UserID: s.UserID, IP: s.IP, Endpoint: s.Endpoint, Method: s.Method, Tier: s.Tier})
	}
}

// accessLogGroupSuffix is appended to the detector's consumer group to name
// the group of the access-log consumer, for the reason of
// detector.OutcomesGroupSuffix.
const accessLogGroupSuffix = "-access-log"

// accessLogDecoder returns the decoder of ACCESS_LOG_TOPIC: its lines as
// mapping reads them, each with an event id derived from where it sits.
func accessLogDecoder(mapping accesslog.Mapping) detector.OutcomeDecoder {
	return func(m event.Message) (event.Outcome, error) {
		return mapping.Parse(m.Value, accesslog.Source{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Time: m.Time})
	}
}
