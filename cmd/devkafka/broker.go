package main

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/zap"
)

// defaultCleanerInterval is how often retention is enforced; kfake's own
// default (log.cleaner.backoff.ms) is an hour.
const defaultCleanerInterval = 2 * time.Second

// brokerConfig is what startBroker needs; tests build it directly.
type brokerConfig struct {
	ListenAddr      string // host:port; port 0 picks a free one
	AdvertisedAddr  string // optional host:port given to clients in metadata
	DecisionsTopic  string
	BansTopic       string
	OutcomesTopic   string
	AccessLogTopic  string // optional
	Partitions      int
	DataDir         string // optional: persist to disk
	Retention       time.Duration
	RetentionBytes  int64 // per partition
	CleanerInterval time.Duration
}

// topics are the topics to create: the stack's, and the access-log topic
// when one is set.
func (cfg brokerConfig) topics() []string {
	var out []string
	for _, t := range []string{cfg.DecisionsTopic, cfg.BansTopic, cfg.OutcomesTopic, cfg.AccessLogTopic} {
		if t != "" {
			out = append(out, t)
		}
	}
	return out
}

// devBroker is a running kfake cluster of one broker plus the goroutine
// that enforces retention.
type devBroker struct {
	cluster *kfake.Cluster
	listen  string
	addr    string
	topics  []string

	stopRetention chan struct{}
	retentionDone chan struct{}
	stopOnce      sync.Once
}

// startBroker starts the broker, creates the topics (with retention.ms and
// retention.bytes) unless they exist already (a reused data dir), and
// starts enforcing retention.
func startBroker(cfg brokerConfig, log *zap.Logger) (*devBroker, error) {
	host, portStr, err := net.SplitHostPort(cfg.ListenAddr)
	if err != nil {
		return nil, fmt.Errorf("listen address %q: %w", cfg.ListenAddr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("listen address %q: %w", cfg.ListenAddr, err)
	}
	if cfg.CleanerInterval <= 0 {
		cfg.CleanerInterval = defaultCleanerInterval
	}
	retention := map[string]string{
		"retention.ms":    strconv.FormatInt(cfg.Retention.Milliseconds(), 10),
		"retention.bytes": strconv.FormatInt(cfg.RetentionBytes, 10),
	}
	opts := []kfake.Opt{
		kfake.Ports(port),
		kfake.ClusterID("devkafka"),
		kfake.GroupMinSessionTimeout(time.Second),
		kfake.WithLogger(kfakeLogger{log.Named("kfake")}),
		kfake.BrokerConfigs(map[string]string{
			"log.cleaner.backoff.ms": strconv.FormatInt(cfg.CleanerInterval.Milliseconds(), 10),
			"log.retention.ms":       retention["retention.ms"],
			"log.retention.bytes":    retention["retention.bytes"],
		}),
	}
	if cfg.DataDir != "" {
		opts = append(opts, kfake.DataDir(cfg.DataDir))
	}
	// kfake always listens on 127.0.0.1 and advertises what it listens on;
	// for another host (or another advertised address), listen ourselves.
	var listen string
	if host != "127.0.0.1" || cfg.AdvertisedAddr != "" {
		opts = append(opts, kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			ln, err := net.Listen(network, cfg.ListenAddr)
			if err != nil {
				return nil, err
			}
			listen = ln.Addr().String()
			return &advertisedListener{Listener: ln, addr: advertise(cfg.AdvertisedAddr, ln.Addr())}, nil
		}))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("start broker on %s: %w", cfg.ListenAddr, err)
	}
	b := &devBroker{
		cluster:       c,
		addr:          c.ListenAddrs()[0],
		topics:        cfg.topics(),
		stopRetention: make(chan struct{}),
		retentionDone: make(chan struct{}),
	}
	b.listen = b.addr
	if listen != "" {
		b.listen = listen
	}
	for _, t := range b.topics {
		err := c.CreateTopic(t, int32(cfg.Partitions), retention)
		if errors.Is(err, kerr.TopicAlreadyExists) {
			log.Info("topic exists already", zap.String("topic", t), zap.Int("partitions", len(c.PartitionInfos(t))))
			continue
		}
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("create topic %s: %w", t, err)
		}
	}
	go b.enforceRetention(cfg.CleanerInterval)
	return b, nil
}

// enforceRetention applies retention on a timer. kfake runs its own cleaner
// only for topics whose retention configs it saw created or altered, not
// for topics reloaded from a data dir; this covers both.
func (b *devBroker) enforceRetention(every time.Duration) {
	defer close(b.retentionDone)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-b.stopRetention:
			return
		case <-t.C:
			b.cluster.ApplyRetention()
		}
	}
}

// Addr is the address clients are told to use.
func (b *devBroker) Addr() string { return b.addr }

// ListenAddr is the address the broker listens on.
func (b *devBroker) ListenAddr() string { return b.listen }

// Topics are the topics the broker serves.
func (b *devBroker) Topics() []string { return b.topics }

// Stop stops retention, then the broker (which persists to the data dir, if
// any). Safe to call more than once.
func (b *devBroker) Stop() {
	b.stopOnce.Do(func() {
		// ApplyRetention on a closed cluster would block forever.
		close(b.stopRetention)
		<-b.retentionDone
		b.cluster.Close()
	})
}

// advertise is the address to give clients: adv when set (its port 0 means
// the real one), else the real address with an unspecified host replaced
// by 127.0.0.1.
func advertise(adv string, real net.Addr) string {
	realHost, realPort, _ := net.SplitHostPort(real.String())
	if adv == "" {
		if ip := net.ParseIP(realHost); ip != nil && ip.IsUnspecified() {
			realHost = "127.0.0.1"
		}
		return net.JoinHostPort(realHost, realPort)
	}
	host, port, _ := net.SplitHostPort(adv)
	if port == "0" {
		port = realPort
	}
	return net.JoinHostPort(host, port)
}

// advertisedListener reports addr as its address, which kfake puts in its
// metadata answers.
type advertisedListener struct {
	net.Listener
	addr string
}

func (l *advertisedListener) Addr() net.Addr { return tcpAddr(l.addr) }

type tcpAddr string

func (a tcpAddr) Network() string { return "tcp" }
func (a tcpAddr) String() string  { return string(a) }

// kfakeLogger routes kfake's logs to zap; its info level is per-request
// chatter, so it goes to debug.
type kfakeLogger struct{ log *zap.Logger }

func (l kfakeLogger) Logf(level kfake.LogLevel, msg string, args ...any) {
	lvl := zap.DebugLevel
	switch level {
	case kfake.LogLevelError:
		lvl = zap.ErrorLevel
	case kfake.LogLevelWarn:
		lvl = zap.WarnLevel
	}
	if ce := l.log.Check(lvl, "kfake"); ce != nil {
		ce.Write(zap.String("detail", fmt.Sprintf(msg, args...)))
	}
}
