// Package broker assembles a Felix broker: the actor tree (streams,
// subscribers, lanes and connections supervisors and their children) and the
// QUIC transport in front of it. It is the embedding API: New, Start, Addr,
// Stop, optionally inside the host program's own protoactor ActorSystem.
package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/config"
	"github.com/getfelix/felix-go/lanes"
	"github.com/getfelix/felix-go/metrics"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/subscribers"
	"github.com/getfelix/felix-go/transport"
)

// requestTimeout bounds one request to a broker actor (spawn, register,
// look up). They answer in microseconds; this only stops a wedged actor from
// hanging a connection forever.
const requestTimeout = 5 * time.Second

// Option configures New.
type Option func(*Broker)

// WithActorSystem runs the broker's actors inside the host's actor system
// instead of a private one. The broker never shuts a system it did not create.
func WithActorSystem(system *actor.ActorSystem) Option {
	return func(b *Broker) { b.system = system }
}

// WithLogger sets the broker's logger (default: a disabled logger).
func WithLogger(log zerolog.Logger) Option {
	return func(b *Broker) { b.log = log }
}

// WithName sets the name of the broker's subtree of actors (default
// "felix"), so two brokers can share one actor system.
func WithName(name string) Option {
	return func(b *Broker) { b.name = name }
}

// Broker is one running Felix broker.
type Broker struct {
	cfg        config.Config
	log        zerolog.Logger
	name       string
	system     *actor.ActorSystem
	ownsSystem bool

	policy     actors.Policy
	lanePolicy actors.Policy
	selector   *lanes.Selector
	queueTotal *actors.ByteBudget

	registry    *actor.PID
	subscribers *actor.PID
	lanesSup    *actor.PID
	connections *actor.PID
	lanes       []lanes.LaneRef

	metrics *metrics.Metrics
	admin   *adminServer

	server       *transport.Server
	stopWatching func()
	nextSubID    atomic.Uint64
	stopped      atomic.Bool
}

// New checks cfg and builds a broker; Start makes it serve.
func New(cfg config.Config, opts ...Option) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b := &Broker{cfg: cfg, log: zerolog.Nop(), name: "felix"}
	for _, o := range opts {
		o(b)
	}
	var err error
	if b.policy, err = actors.ParsePolicy(cfg.SubscriberQueuePolicy); err != nil {
		return nil, err
	}
	if b.lanePolicy, err = actors.ParsePolicy(cfg.SubscriberLaneQueuePolicy); err != nil {
		return nil, err
	}
	sel, err := lanes.ParseSelection(cfg.SubscriberLaneShard)
	if err != nil {
		return nil, err
	}
	b.selector = &lanes.Selector{Lanes: cfg.SubscriberWriterLanes, Policy: sel, SinglePer: cfg.SubscriberSingleWriterPerConn}
	b.queueTotal = actors.NewByteBudget(cfg.SubscriberQueueMaxBytesTotal)
	b.metrics = metrics.New(b.queueTotal)
	return b, nil
}

// Start spawns the actor tree and binds the QUIC listener. Once it returns,
// the broker accepts connections at Addr (and has written AddrFile).
func (b *Broker) Start() error {
	if b.system == nil {
		b.system = actor.NewActorSystem(actors.LoggerFactory(b.log.With().Str("component", "actors").Logger()))
		b.ownsSystem = true
	}
	b.stopWatching = actors.WatchRestarts(b.system, b.log, func(kind actors.Kind, d actor.Directive) {
		b.metrics.ActorRestarts.WithLabelValues(string(kind), d.String()).Inc()
	})
	root := b.system.Root

	var err error
	spawn := func(name string, props *actor.Props) *actor.PID {
		if err != nil {
			return nil
		}
		var pid *actor.PID
		pid, err = root.SpawnNamed(props, b.name+"/"+name)
		return pid
	}
	b.registry = spawn("streams", streams.RegistryProps(streams.RegistryConfig{
		Shard: streams.ShardConfig{
			SubscriberPolicy: b.policy,
			RingRecords:      b.cfg.ReplayRingRecords,
			RingBytes:        b.cfg.ReplayRingMaxBytes,
			RingTotal:        actors.NewByteBudget(b.cfg.ReplayRingMaxBytesTotal),
		},
		PubQueueDepth: b.cfg.PubQueueDepth,
		Log:           b.log,
		OnStats:       b.countFanout,
		OnMailbox:     func(m *actors.Mailbox) { b.metrics.Mailboxes().Add(actors.KindShard, m) },
	}))
	b.subscribers = spawn("subscribers", actors.SupervisorProps(actors.KindFeeder))
	b.lanesSup = spawn("lanes", actors.SupervisorProps(actors.KindLane))
	b.connections = spawn("connections", actors.SupervisorProps(actors.KindConnWriter))
	if err != nil {
		b.stopActors()
		return fmt.Errorf("broker: spawn supervisors: %w", err)
	}
	for i := range b.cfg.SubscriberWriterLanes {
		ref := lanes.LaneRef{Index: i}
		props := lanes.LaneProps(i, lanes.LaneConfig{
			Depth: b.cfg.SubscriberLaneQueueDepth, Policy: b.lanePolicy, Log: b.log,
			OnDrop:    func(*lanes.Deliver) { b.metrics.LaneDropped.Inc() },
			OnRefused: func(*lanes.Deliver) { b.metrics.WriterRefused.Inc() },
		}, func(m *actors.Mailbox) {
			ref.Mailbox = m
			b.metrics.Mailboxes().Add(actors.KindLane, m)
		})
		if ref.PID, err = actors.Spawn(root, b.lanesSup, fmt.Sprintf("lane-%d", i), props, requestTimeout); err != nil {
			b.stopActors()
			return fmt.Errorf("broker: spawn lanes: %w", err)
		}
		b.lanes = append(b.lanes, ref)
	}

	tlsConf, err := transport.ServerTLS(b.cfg.TLSCert, b.cfg.TLSKey, b.cfg.DataDir)
	if err != nil {
		b.stopActors()
		return err
	}
	b.server, err = transport.Listen(b.cfg.Listen, tlsConf, transport.Config{
		MaxFrameBytes:        b.cfg.MaxFrameBytes,
		PreAuthMaxFrameBytes: b.cfg.PreAuthMaxFrameBytes,
		AuthTimeout:          b.cfg.AuthTimeout,
		PublishWindow:        b.cfg.PublishWindow,
		Log:                  b.log,
		OnConnection:         b.countConnection,
	}, b)
	if err != nil {
		b.stopActors()
		return err
	}
	if b.cfg.Admin != "" {
		if b.admin, err = startAdmin(b.cfg.Admin, b.metrics.Registry, b.log); err != nil {
			_ = b.Stop(context.Background())
			return err
		}
	}
	if b.cfg.AddrFile != "" {
		if err := writeAddrFile(b.cfg.AddrFile, b.Addr().String()); err != nil {
			_ = b.Stop(context.Background())
			return err
		}
	}
	b.log.Info().Str("addr", b.Addr().String()).Str("data_dir", b.cfg.DataDir).Msg("broker accepting connections")
	return nil
}

// writeAddrFile writes atomically, so a script polling for the file never
// reads half an address.
func writeAddrFile(path, addr string) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(addr+"\n"), 0o644); err != nil {
		return fmt.Errorf("broker: write addr file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("broker: write addr file: %w", err)
	}
	return nil
}

// AdminAddr is the bound admin HTTP address, or nil when the admin endpoint is off.
func (b *Broker) AdminAddr() net.Addr {
	if b.admin == nil {
		return nil
	}
	return b.admin.addr()
}

// Metrics is the broker's metrics registry (what /metrics serves).
func (b *Broker) Metrics() *metrics.Metrics { return b.metrics }

// Addr is the bound QUIC address.
func (b *Broker) Addr() net.Addr { return b.server.Addr() }

// ActorSystem is the system the broker's actors run in.
func (b *Broker) ActorSystem() *actor.ActorSystem { return b.system }

// Stop closes every connection, then stops the actors: transport first, so
// nothing new arrives while the tree winds down; connections before lanes
// before subscribers before streams, so each hop stops after what feeds it.
func (b *Broker) Stop(ctx context.Context) error {
	if !b.stopped.CompareAndSwap(false, true) {
		return nil
	}
	var err error
	if b.admin != nil {
		b.admin.setReady(false)
	}
	if b.server != nil {
		err = b.server.Close(ctx)
	}
	b.stopActors()
	if b.stopWatching != nil {
		b.stopWatching()
	}
	if b.ownsSystem {
		b.system.Shutdown()
	}
	if b.admin != nil {
		err = errors.Join(err, b.admin.close(ctx))
	}
	b.log.Info().Msg("broker stopped")
	return err
}

func (b *Broker) stopActors() {
	for _, pid := range []*actor.PID{b.connections, b.lanesSup, b.subscribers, b.registry} {
		if pid == nil {
			continue
		}
		if err := b.system.Root.StopFuture(pid).Wait(); err != nil && !errors.Is(err, actor.ErrTimeout) {
			b.log.Warn().Err(err).Str("actor", pid.Id).Msg("stop")
		}
	}
}

// Open implements transport.Backend: it spawns the connection's writer.
func (b *Broker) Open(info transport.ConnInfo) (transport.Session, error) {
	s := &session{b: b, info: info, shards: make(map[shardKey]*streams.ShardRef), subs: make(map[uint64]*subscription)}
	ref := &lanes.WriterRef{ConnID: info.ID, Budget: lanes.NewConnBudget(b.cfg.SubscriberEgressMaxBytes)}
	props := lanes.WriterProps(lanes.WriterConfig{
		Log:           b.log,
		Root:          b.system.Root,
		OnStreamError: s.streamFailed,
		OnWritten:     b.countWritten,
	}, func(m *actors.Mailbox) {
		ref.Mailbox = m
		b.metrics.Mailboxes().Add(actors.KindConnWriter, m)
	})
	pid, err := actors.Spawn(b.system.Root, b.connections, fmt.Sprintf("conn-%d", info.ID), props, requestTimeout)
	if err != nil {
		return nil, err
	}
	ref.PID = pid
	s.writer = ref
	return s, nil
}

func (b *Broker) feederBatch() subscribers.BatchConfig {
	return subscribers.BatchConfig{
		MaxEvents:   b.cfg.EventBatchMaxEvents,
		MaxBytes:    b.cfg.EventBatchMaxBytes,
		MaxDelay:    b.cfg.EventBatchMaxDelay,
		SingleEvent: b.cfg.FanoutBatchSize <= 1,
	}
}
