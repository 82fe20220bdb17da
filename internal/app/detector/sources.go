package detector

import (
	"context"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/accesslog"
	"github.com/ratewarden/ratewarden/internal/detector"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/kafkabus"
	"github.com/ratewarden/ratewarden/internal/lifecycle"
	"github.com/ratewarden/ratewarden/internal/redisabuse"
	"github.com/ratewarden/ratewarden/internal/redisfleet"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// build makes the engines over Redis and publisher, and the detector over
// its sources.
func (a *App) build(deps Deps, rdb redis.UniversalClient, publisher *kafkabus.BanPublisher) error {
	cfg, set := a.cfg, a.set
	blacklist := redisfleet.NewBlacklist(rdb, cfg.RedisKeyPrefix)
	ledger := redisabuse.NewLedger(rdb, cfg.RedisKeyPrefix, blacklist)

	engine := abuse.NewEngine(a.engineConfig(set), redisabuse.NewWindows(rdb, cfg.RedisKeyPrefix), ledger, publisher)
	outcomes, err := abuse.NewOutcomeEngine(a.outcomeConfig(set), redisabuse.NewDistinct(rdb, cfg.RedisKeyPrefix), ledger, publisher)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.engine, a.outcomes = engine, outcomes
	a.ipv6Prefix.Store(int64(set.Detection().IPv6Prefix))
	a.mu.Unlock()
	// Each source reads in a consumer group of its own (see
	// detector.OutcomesGroupSuffix): a rebalance of one loop never stops
	// another. The outcome reports and the access log share one engine,
	// which keeps their topics' partitions apart.
	sources := []detector.Source{
		{Name: detector.SourceDecisions, Topic: cfg.DecisionsTopic, Group: cfg.GroupID, Pipeline: detector.DecisionPipeline(a.engine)},
		{Name: detector.SourceOutcomes, Topic: cfg.OutcomesTopic, Group: cfg.GroupID + detector.OutcomesGroupSuffix,
			Pipeline: detector.OutcomePipeline(outcomes, detector.DecodeOutcomeMessage, nil)},
	}
	if cfg.AccessLogTopic != "" {
		sources = append(sources, detector.Source{Name: detector.SourceAccessLog, Topic: cfg.AccessLogTopic, Group: cfg.GroupID + accessLogGroupSuffix,
			Pipeline: detector.OutcomePipeline(outcomes, accessLogDecoder(cfg.AccessLogFields),
				func(ctx context.Context, outs []*event.Outcome) error {
					// The grouping of the rules file in force, as the engines'.
					return detector.BlacklistMarker(blacklist, int(a.ipv6Prefix.Load()), set.UserKey)(ctx, outs)
				})})
	}
	a.svc, err = detector.New(a.log, deps.Registry, sources...)
	return err
}

// engineConfig is the decision engine's configuration from set.
func (a *App) engineConfig(set *rules.Set) abuse.Config {
	return abuse.Config{Detection: set.Detection(), Exempt: exempt(set.Exempt), UserKey: set.UserKey, Now: a.now}
}

// outcomeConfig is the outcome engine's configuration from set.
func (a *App) outcomeConfig(set *rules.Set) abuse.OutcomeConfig {
	return abuse.OutcomeConfig{Detection: set.Detection(), Exempt: exempt(set.ExemptRequest), ExemptUser: exempt(set.ExemptUser),
		UserKey: set.UserKey, Now: a.now}
}

// apply puts a rules file accepted by the rule manager in the engines:
// its thresholds and exemptions hold from their next batch on. The first,
// loaded before the engines exist, is what they are built with.
func (a *App) apply(set *rules.Set) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.engine == nil {
		return
	}
	a.engine.SetConfig(a.engineConfig(set))
	a.ipv6Prefix.Store(int64(set.Detection().IPv6Prefix))
	// The rule manager compiled set, which validates the scenarios'
	// endpoints: this cannot fail but for a defect.
	if err := a.outcomes.SetConfig(a.outcomeConfig(set)); err != nil {
		a.log.Error("outcome detection not reloaded; the previous stays", zap.Error(err))
	}
}

// addConsumers adds one part per source to g: it announces the source and
// consumes its topic.
func (a *App) addConsumers(g *lifecycle.Group) {
	cfg := a.cfg
	// What each source's start line says besides its topic and group.
	startFields := map[string][]zap.Field{
		detector.SourceDecisions: {zap.String("redis", a.redisCfg.Target()), zap.Strings("kafka", cfg.KafkaBrokers),
			zap.Bool("dry_run", a.set.Detection().DryRun), zap.Duration("max_clock_skew", a.engine.MaxClockSkew()),
			zap.Bool("user_ids_case_sensitive", cfg.CaseSensitiveUserIDs)},
		detector.SourceOutcomes:  {zap.Strings("scenarios", a.outcomes.BanReasons())},
		detector.SourceAccessLog: {zap.String("fields", cfg.AccessLogFields.String())},
	}
	for _, c := range a.svc.Consumers() {
		src := c.Source()
		g.Add(lifecycle.Part{Name: src.Name + " consumer",
			Start: func(context.Context) error {
				a.log.Info("detector consuming", append([]zap.Field{zap.String("source", src.Name), zap.String("addr", a.Addr()),
					zap.String("topic", src.Topic), zap.String("group", src.Group)}, startFields[src.Name]...)...)
				return nil
			},
			Run: func(ctx context.Context) error {
				return consume(ctx, kafkabus.ConsumerConfig{
					Brokers: cfg.KafkaBrokers, Topic: src.Topic, GroupID: src.Group,
					BatchSize: cfg.BatchSize, BatchWait: cfg.BatchWait, OnStats: c.ReportStats,
				}, a.log.Named("consumer").With(zap.String("source", src.Name)), c.Handle)
			}})
	}
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
