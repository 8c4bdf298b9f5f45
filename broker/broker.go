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
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/cluster"
	"github.com/getfelix/felix-go/config"
	"github.com/getfelix/felix-go/internal/quicconf"
	"github.com/getfelix/felix-go/kafka"
	"github.com/getfelix/felix-go/lanes"
	"github.com/getfelix/felix-go/metadata"
	"github.com/getfelix/felix-go/metrics"
	"github.com/getfelix/felix-go/quota"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/subscribers"
	"github.com/getfelix/felix-go/transport"
	"github.com/getfelix/felix-go/wire"
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

// WithoutActorCluster keeps a cluster member's actor system out of
// protoactor's cluster (no remote is started on it): for a host program
// that runs its own protoactor remote or cluster on the system it gives
// the broker. Placement, routing and fencing do not need it; `felix tree
// --cluster` then misses this member.
func WithoutActorCluster() Option {
	return func(b *Broker) { b.noActorCluster = true }
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
	cfg    config.Config
	log    zerolog.Logger
	name   string
	system *actor.ActorSystem
	// commits wakes readers waiting for a shard's commits (commitwatch.go).
	commits commitWatches
	// replStatus is the latest view of each replica this member runs.
	replStatus replicaStatuses
	// replicaViews is each replica's role, for consumer groups
	// (cluster.ShardKey → *replicaView, groupcluster.go).
	replicaViews sync.Map
	// disk is the durable logs' file system under --chaos (chaosdisk.go).
	disk chaosDisk
	// uiRates counts fan-out for the streams a stream page watches (uirates.go).
	uiRates streamRates
	// noActorCluster: see WithoutActorCluster.
	noActorCluster bool
	ownsSystem     bool

	policy     actors.Policy
	lanePolicy actors.Policy
	selector   *lanes.Selector
	queueTotal *actors.ByteBudget

	registry    *actor.PID // stream definitions
	shards      *actor.PID // the shard supervisor
	subscribers *actor.PID
	sessions    *actor.PID
	lanesSup    *actor.PID
	connections *actor.PID
	lanesMu     sync.Mutex // guards lanes and laneGen: a stopped lane is replaced
	lanes       []lanes.LaneRef
	laneGen     int

	// groups is the consumer groups' supervisor (groups.go).
	groups       *actor.PID
	groupMetrics *metrics.GroupMetrics
	groupRefs    sync.Map // groupKey → *groupEntry

	metrics *metrics.Metrics
	dir     *actors.Directory
	// verifier checks tokens; nil under auth none.
	verifier *auth.Verifier
	// conns and tenants hold the connection and tenant limits.
	conns   *quota.Connections
	tenants *quota.Tenants
	store   *metadata.Store
	defs    []streams.Def // loaded from store at Start
	// producers is every idempotent producer id given out (producers.go).
	producers producerRegistry
	admin     *adminServer

	server       *transport.Server
	kafka        *kafka.Listener // nil unless kafka_listen (kafka.go)
	stopWatching func()
	nextSubID    atomic.Uint64
	stopped      atomic.Bool

	// logFiles bounds the durable logs' open files together (durable.go).
	logFiles durableFiles

	// node is this broker's cluster membership (cluster.go); nil for a
	// single broker, and until Start made it. The registry reads it from
	// its own goroutine.
	node atomic.Pointer[cluster.Node]
	// peers is the member's peer link (peers.go); nil without one.
	peers atomic.Pointer[Peers]
	// snaps serves and copies replicas' segments for snapshots
	// (snapshots.go), once the peer link started.
	snaps *snapshots
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
	b.dir = actors.NewDirectory()
	b.metrics = metrics.New(b.dir, b.queueTotal)
	b.metrics.Registry.MustRegister(replicationCollector{&b.replStatus})
	b.groupMetrics = metrics.NewGroupMetrics(b.metrics.Registry)
	limits := quota.Config{
		MaxConnections: cfg.MaxClientConnections, MaxConnectionsPerIP: cfg.MaxConnectionsPerIP,
		PublishBytesPerSec: cfg.TenantPublishBytesPerSec, PublishMsgsPerSec: cfg.TenantPublishMsgsPerSec,
		MaxStreams: cfg.TenantMaxStreams, MaxSubscriptions: cfg.TenantMaxSubscriptions,
	}
	counted := quota.WithOnRefused(func(_, limit string) { b.metrics.QuotaRefused.WithLabelValues(limit).Inc() })
	b.conns = quota.NewConnections(limits, counted)
	b.tenants = quota.NewTenants(limits, counted)
	return b, nil
}

// Start spawns the actor tree and binds the QUIC listener. Once it returns,
// the broker accepts connections at Addr (and has written AddrFile).
func (b *Broker) Start() error {
	if b.system == nil {
		b.system = actor.NewActorSystem(actors.LoggerFactory(b.log.With().Str("component", "actors").Logger()))
		b.ownsSystem = true
	}
	if err := b.setupAuth(); err != nil {
		return err
	}
	if err := b.loadDefinitions(); err != nil {
		return err
	}
	b.stopWatching = actors.WatchRestarts(b.system, b.log, func(ev *actor.SupervisorEvent, kind actors.Kind) {
		b.metrics.ActorRestarts.WithLabelValues(string(kind), ev.Directive.String()).Inc()
		b.dir.RecordFailure(ev.Child.Id, ev.Directive, fmt.Sprint(ev.Reason))
	})
	if err := b.spawnTree(); err != nil {
		b.abortStart()
		return err
	}
	if err := b.listen(); err != nil {
		b.abortStart()
		return err
	}
	if err := b.listenKafka(); err != nil {
		_ = b.Stop(context.Background())
		return err
	}
	if b.cfg.Admin != "" {
		var err error
		if b.admin, err = startAdmin(b.cfg.Admin, b.metrics.Registry, b.log, b); err != nil {
			_ = b.Stop(context.Background())
			return err
		}
	}
	if err := b.startCluster(); err != nil {
		_ = b.Stop(context.Background())
		return err
	}
	b.warnExposed()
	if b.cfg.AddrFile != "" {
		if err := writeAddrFile(b.cfg.AddrFile, b.Addr().String()); err != nil {
			_ = b.Stop(context.Background())
			return err
		}
	}
	b.log.Info().Str("addr", b.Addr().String()).Str("data_dir", b.cfg.DataDir).Msg("broker accepting connections")
	return nil
}

// loadDefinitions opens the metadata store and reads the stored streams
// and producer ids.
func (b *Broker) loadDefinitions() error {
	store, err := metadata.Open(b.cfg.DataDir)
	if err != nil {
		return err
	}
	b.store = store
	metas, err := store.Streams()
	if err != nil {
		_ = store.Close()
		return err
	}
	for _, m := range metas {
		d, err := fromMeta(m)
		if err != nil {
			_ = store.Close()
			return fmt.Errorf("broker: stream %s/%s/%s in %s: %w", m.Tenant, m.Namespace, m.Stream, metadata.FileName, err)
		}
		b.defs = append(b.defs, d)
	}
	producers, err := store.Producers()
	if err != nil {
		_ = store.Close()
		return err
	}
	b.producers.load(producers)
	return nil
}

// spawnTree spawns the top-level supervisors and the lanes.
func (b *Broker) spawnTree() error {
	root := b.system.Root
	var err error
	// spawn starts a top-level supervisor; props is built by mk with the
	// callback that captures its mailbox for the directory.
	spawn := func(name string, labels map[string]string, mk func(created func(*actors.Mailbox)) *actor.Props) *actor.PID {
		if err != nil {
			return nil
		}
		var mb *actors.Mailbox
		var pid *actor.PID
		pid, err = root.SpawnNamed(mk(func(m *actors.Mailbox) { mb = m }), b.name+"/"+name)
		b.dir.Add(pid, actors.KindSupervisor, mb, labels)
		return pid
	}
	// The shards keep their paths under felix/streams; the definitions'
	// owner is a sibling, so its restart stops no shard.
	streamsCfg := b.registryConfig()
	b.shards = spawn("streams", children(actors.KindShard), func(created func(*actors.Mailbox)) *actor.Props {
		return streams.ShardSupervisorProps(streamsCfg, created)
	})
	b.sessions = spawn("sessions", children(actors.KindSession), b.supervisorProps(actors.KindSession))
	b.registry = spawn("registry", map[string]string{"owns": "stream_definitions"}, func(created func(*actors.Mailbox)) *actor.Props {
		return streams.RegistryProps(streamsCfg, b.shards, created)
	})
	b.subscribers = spawn("subscribers", children(actors.KindFeeder), b.supervisorProps(actors.KindFeeder))
	b.lanesSup = spawn("lanes", children(actors.KindLane), b.supervisorProps(actors.KindLane))
	b.connections = spawn("connections", children(actors.KindConnWriter), b.supervisorProps(actors.KindConnWriter))
	b.groups = spawn("groups", children(actors.KindGroup), b.groupsSupervisorProps)
	if err != nil {
		return fmt.Errorf("broker: spawn supervisors: %w", err)
	}
	for i := range b.cfg.SubscriberWriterLanes {
		ref := lanes.LaneRef{Index: i}
		props := lanes.LaneProps(i, b.laneConfig(), func(m *actors.Mailbox) { ref.Mailbox = m })
		if ref.PID, err = actors.Spawn(root, b.lanesSup, fmt.Sprintf("lane-%d", i), props, requestTimeout); err != nil {
			return fmt.Errorf("broker: spawn lanes: %w", err)
		}
		b.dir.Add(ref.PID, actors.KindLane, ref.Mailbox, map[string]string{"lane": fmt.Sprint(i)})
		b.lanes = append(b.lanes, ref)
	}
	return nil
}

// listen binds the felix/1 front end in front of the service.
func (b *Broker) listen() error {
	tlsConf, err := quicconf.ServerTLS(b.cfg.TLSCert, b.cfg.TLSKey, b.cfg.DataDir)
	if err != nil {
		return err
	}
	if b.cfg.TLSClientCA != "" {
		if err := quicconf.RequireClientCerts(tlsConf, b.cfg.TLSClientCA); err != nil {
			return err
		}
	}
	b.server, err = transport.Listen(b.cfg.Listen, tlsConf, transport.Config{
		MaxFrameBytes:        b.cfg.MaxFrameBytes,
		PreAuthMaxFrameBytes: b.cfg.PreAuthMaxFrameBytes,
		AuthTimeout:          b.cfg.AuthTimeout,
		FrameReadTimeout:     b.cfg.FrameReadTimeout,
		PublishWindow:        b.cfg.PublishWindow,
		Log:                  b.log,
		OnConnection:         b.countConnection,
		Admit:                b.admitConnection,
	}, b)
	return err
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
	err = b.closeKafka(ctx)
	if b.server != nil {
		err = errors.Join(err, b.server.Close(ctx))
	}
	err = errors.Join(err, b.stopCluster(ctx))
	b.stopActors()
	// After the shards: they send over the link until they stop.
	err = errors.Join(err, b.closePeers())
	if b.stopWatching != nil {
		b.stopWatching()
	}
	if b.store != nil {
		err = errors.Join(err, b.store.Close())
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
	for _, pid := range []*actor.PID{b.sessions, b.connections, b.lanesSup, b.subscribers, b.groups, b.registry, b.shards} {
		if pid == nil {
			continue
		}
		if err := b.system.Root.StopFuture(pid).Wait(); err != nil && !errors.Is(err, actor.ErrTimeout) {
			b.log.Warn().Err(err).Str("actor", pid.Id).Msg("stop")
		}
	}
}

// lane returns lane i, replacing it first if it was stopped for good.
func (b *Broker) lane(i int) (lanes.LaneRef, error) {
	b.lanesMu.Lock()
	defer b.lanesMu.Unlock()
	ref := b.lanes[i]
	if !ref.Mailbox.IsClosed() {
		return ref, nil
	}
	b.laneGen++
	ref = lanes.LaneRef{Index: i}
	props := lanes.LaneProps(i, b.laneConfig(), func(m *actors.Mailbox) { ref.Mailbox = m })
	pid, err := actors.Spawn(b.system.Root, b.lanesSup, fmt.Sprintf("lane-%d.%d", i, b.laneGen), props, requestTimeout)
	if err != nil {
		return lanes.LaneRef{}, err
	}
	ref.PID = pid
	b.dir.Add(pid, actors.KindLane, ref.Mailbox, map[string]string{"lane": fmt.Sprint(i)})
	b.lanes[i] = ref
	b.log.Warn().Int("lane", i).Str("actor", pid.Id).Msg("lane had stopped; replaced it")
	return ref, nil
}

func (b *Broker) laneConfig() lanes.LaneConfig {
	return lanes.LaneConfig{
		Depth: b.cfg.SubscriberLaneQueueDepth, Policy: b.lanePolicy, Log: b.log,
		OnDrop: func(d *lanes.Deliver) {
			b.metrics.LaneDropped.Inc()
			if d.Next > 0 {
				// A durable subscription never loses a batch silently: its
				// session ends it lagged, resuming after what it really has.
				b.system.Root.Send(d.Session, &lanes.Lagged{SubscriptionID: d.SubscriptionID})
			}
		},
		OnRefused: func(*lanes.Deliver) { b.metrics.WriterRefused.Inc() },
	}
}

func (b *Broker) registryConfig() streams.RegistryConfig {
	return streams.RegistryConfig{
		CheckStreams: b.tenants.CheckStreams,
		Shard: streams.ShardConfig{
			SubscriberPolicy:  b.policy,
			RingRecords:       b.cfg.ReplayRingRecords,
			RingBytes:         b.cfg.ReplayRingMaxBytes,
			RingTotal:         actors.NewByteBudget(b.cfg.ReplayRingMaxBytesTotal),
			RetentionInterval: b.cfg.DurableRetentionInterval,
			IdleTimeout:       b.cfg.StreamIdleTimeout,
			OnIdle: func(scope wire.Scope, shard uint32) {
				b.system.Root.Send(b.registry, &streams.ShardIdle{Scope: scope, Shard: shard})
			},
			BlockMaxWait:    b.cfg.SubscriberBlockMaxWait,
			RemoveShardData: b.removeShardLog,
			OnBlocked: func(waiting bool) {
				if waiting {
					b.metrics.ShardsBlocked.Inc()
				} else {
					b.metrics.ShardsBlocked.Dec()
				}
			},
		},
		PubQueueDepth: b.cfg.PubQueueDepth,
		Log:           b.log,
		Store:         b.defStore(),
		Defs:          b.localDefs(),
		Place:         b.place,
		OpenLog:       b.openLog,
		OpenReplica:   b.openReplica,
		RemoveLogs:    b.removeLogs,
		Root:          b.system.Root,
		OnStats:       b.countFanout,
		OnSpawned: func(pid *actor.PID, mb *actors.Mailbox, scope wire.Scope, shard uint32) {
			b.dir.Add(pid, actors.KindShard, mb, map[string]string{"stream": scope.String(), "shard": fmt.Sprint(shard)})
		},
	}
}

// localDefs are the definitions the registry starts with: metadata.db's on
// a single broker; none for a cluster member, which learns them from etcd
// when it joins (definitions a member kept from a life as a single broker
// are not the cluster's, and are left alone).
func (b *Broker) localDefs() []streams.Def {
	if b.clustered() {
		if len(b.defs) > 0 {
			b.log.Warn().Int("streams", len(b.defs)).Str("file", metadata.FileName).Msg("this data directory has stream definitions from a single broker; a cluster member ignores them (they are the cluster's only when created in it)")
		}
		return nil
	}
	return b.defs
}

// defStore is where the registry keeps definitions: metadata.db on a
// single broker, etcd in a cluster.
func (b *Broker) defStore() streams.DefStore {
	if b.clustered() {
		return clusterDefs{b}
	}
	return defStore{b.store}
}

// children labels a supervisor in the directory with its children's kind.
func children(kind actors.Kind) map[string]string {
	return map[string]string{"children": string(kind)}
}

// supervisorProps returns a props builder for a plain supervisor of kind.
func (b *Broker) supervisorProps(kind actors.Kind) func(func(*actors.Mailbox)) *actor.Props {
	return func(created func(*actors.Mailbox)) *actor.Props { return actors.SupervisorProps(kind, created) }
}

func (b *Broker) feederBatch() subscribers.BatchConfig {
	return subscribers.BatchConfig{
		MaxEvents:   b.cfg.EventBatchMaxEvents,
		MaxBytes:    b.cfg.EventBatchMaxBytes,
		MaxDelay:    b.cfg.EventBatchMaxDelay,
		SingleEvent: b.cfg.FanoutBatchSize <= 1,
	}
}

// abortStart undoes a Start that failed part way.
func (b *Broker) abortStart() {
	b.stopActors()
	if b.stopWatching != nil {
		b.stopWatching()
	}
	if b.store != nil {
		_ = b.store.Close()
		b.store = nil
	}
	if b.ownsSystem {
		b.system.Shutdown()
	}
}
