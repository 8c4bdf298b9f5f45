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
	"github.com/getfelix/felix-go/admin"
	"github.com/getfelix/felix-go/authgate"
	"github.com/getfelix/felix-go/cachefront"
	"github.com/getfelix/felix-go/cluster"
	"github.com/getfelix/felix-go/config"
	"github.com/getfelix/felix-go/defstore"
	"github.com/getfelix/felix-go/durable"
	"github.com/getfelix/felix-go/groups"
	"github.com/getfelix/felix-go/internal/quicconf"
	"github.com/getfelix/felix-go/kafka"
	"github.com/getfelix/felix-go/lanes"
	"github.com/getfelix/felix-go/member"
	"github.com/getfelix/felix-go/metadata"
	"github.com/getfelix/felix-go/metrics"
	"github.com/getfelix/felix-go/persistence"
	"github.com/getfelix/felix-go/persistence/errorfs"
	"github.com/getfelix/felix-go/producers"
	"github.com/getfelix/felix-go/quota"
	"github.com/getfelix/felix-go/scramlogin"
	"github.com/getfelix/felix-go/streamfront"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/subscribers"
	"github.com/getfelix/felix-go/transport"
	"github.com/getfelix/felix-go/webfront"
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

// WithoutActorCluster starts no actor remote on a cluster member's actor
// system (the guarded, mutual-TLS one other members read its tree
// through): for a host program that runs its own protoactor remote or
// cluster on the system it gives the broker. Placement, routing and
// fencing do not need it; `felix tree --cluster` then misses this member.
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
	// disk is the durable logs' file system under --chaos: a chaos request
	// makes it fail as a failing disk does (FailDisk).
	disk *errorfs.FS
	// fanoutRates counts fan-out for the streams a stream page watches
	// (admin.FanoutRates; counting.go feeds it).
	fanoutRates admin.FanoutRates
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
	lanesSup    *actor.PID // owns the lane set (lanes.GetLane)
	connections *actor.PID
	// lanes caches each lane as its supervisor last served it, until that
	// lane stops.
	lanes []atomic.Pointer[lanes.LaneRef]

	// groups is the consumer groups' supervisor (fronts.go).
	groups       *actor.PID
	groupMetrics *metrics.GroupMetrics
	// streamFront, groupFront and cacheFront make each connection's stream
	// administration, group and cache calls (fronts.go).
	streamFront *streamfront.Front
	groupFront  *groups.Front
	cacheFront  *cachefront.Front

	metrics *metrics.Metrics
	latency *metrics.Latency // latency.go
	dir     *actors.Directory
	// gate authenticates clients and checks their principals (auth.go).
	gate *authgate.Gate
	// conns, authFailures and tenants hold the connection, failed
	// authentication and tenant limits.
	conns        *quota.Connections
	authFailures *quota.AuthFailures
	tenants      *quota.Tenants
	store        *metadata.Store
	// kafkaUsers are the Kafka SCRAM users kept, or why none are
	// (kafkausers.go).
	kafkaUsers *scramlogin.KafkaUsers
	defs       []streams.Def // loaded from store at Start
	// producers is every idempotent producer id given out.
	producers producers.Registry
	admin     *admin.Server

	server  *transport.Server
	kafka   *kafka.Listener  // nil unless kafka_listen (kafka.go)
	browser *webfront.Server // nil unless browser_listen (browser.go)
	// browserPort is the browser front end's port for the admin pages
	// (0: off); set after the admin endpoint serves, so read atomically.
	browserPort atomic.Int64
	// browserWT is the browser front end's WebTransport listener for the
	// admin pages (nil: off); set as browserPort is.
	browserWT    atomic.Pointer[browserWebTransport]
	stopWatching func()
	nextSubID    atomic.Uint64
	stopped      atomic.Bool
	// stopping closes when Stop begins, stopDone when it has finished:
	// a second Stop (the host's, after the broker stopped itself) waits
	// for the first.
	stopping, stopDone chan struct{}
	// fatal carries what Fatal reports (corewatch.go, cluster.go).
	fatal     chan error
	coreWatch *actor.PID // watches the core actors (corewatch.go)
	// joined: a single broker once started, a member once it first joined
	// the cluster (serving); /ready answers 200 from then until Stop.
	joined atomic.Bool

	// logs opens and removes the durable shard logs.
	logs *durable.Logs

	// tlsCerts is the listeners' certificate, reloaded on SIGHUP (tlsreload.go).
	tlsCerts *quicconf.Certificates

	// node is this broker's cluster membership (cluster.go); nil for a
	// single broker, and until Start made it. The registry reads it from
	// its own goroutine.
	node atomic.Pointer[cluster.Node]
	// member is the raft and peer side of a cluster member: the replicas
	// of replicated shards and the peer link, over what memberHost
	// (member.go) hands it.
	member *member.Member
}

// New checks cfg and builds a broker; Start makes it serve.
func New(cfg config.Config, opts ...Option) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b := &Broker{cfg: cfg, log: zerolog.Nop(), name: "felix", disk: errorfs.Wrap(persistence.OSFS),
		stopping: make(chan struct{}), stopDone: make(chan struct{}), fatal: make(chan error, 1)}
	for _, o := range opts {
		o(b)
	}
	var err error
	if b.policy, err = actors.ParsePolicy(cfg.SubscriberQueuePolicy); err != nil {
		return nil, err
	}
	if b.logs, err = b.newLogs(); err != nil {
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
	b.member = member.New(memberHost{b})
	b.groupMetrics = metrics.NewGroupMetrics(b.metrics.Registry)
	if b.latency, err = newLatency(cfg, b.metrics.Registry); err != nil {
		return nil, err
	}
	limits := quota.Config{
		MaxConnections:             cfg.MaxClientConnections,
		MaxConnectionsPerIP:        cfg.MaxConnectionsPerIP,
		MaxTenantConnections:       cfg.TenantMaxConnections,
		MaxPreAuthConnections:      cfg.MaxPreAuthConnections,
		MaxPreAuthConnectionsPerIP: cfg.MaxPreAuthConnectionsPerIP,
		PublishBytesPerSec:         cfg.TenantPublishBytesPerSec,
		PublishMsgsPerSec:          cfg.TenantPublishMsgsPerSec,
		MaxStreams:                 cfg.TenantMaxStreams,
		MaxSubscriptions:           cfg.TenantMaxSubscriptions,
		AuthFailureBurst:           cfg.AuthFailureBurst,
		AuthFailureInterval:        cfg.AuthFailureInterval,
		AuthFailureMaxAddresses:    cfg.AuthFailureMaxAddresses,
	}
	counted := quota.WithOnRefused(func(_, limit string) { b.metrics.QuotaRefused.WithLabelValues(limit).Inc() })
	b.conns = quota.NewConnections(limits, counted)
	b.tenants = quota.NewTenants(limits, counted)
	b.authFailures = quota.NewAuthFailures(limits)
	b.metrics.WatchAdmission(func() metrics.Admission {
		pre, _ := b.conns.PreAuth()
		authenticated, _, _ := b.conns.Open()
		return metrics.Admission{PreAuth: pre, Authenticated: authenticated, FailingAddresses: b.authFailures.Addresses()}
	})
	return b, nil
}

// Start spawns the actor tree and binds the QUIC listener. Once it returns,
// the broker accepts connections at Addr; a single broker has written
// AddrFile, a cluster member writes it once it joined the cluster, which
// it goes on trying in the background.
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
	if err := b.setupKafkaUsers(); err != nil {
		b.abortStart()
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
	if err := b.watchCore(); err != nil {
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
		if err := b.startAdmin(); err != nil {
			_ = b.Stop(context.Background())
			return err
		}
	}
	if err := b.listenBrowser(); err != nil {
		_ = b.Stop(context.Background())
		return err
	}
	if err := b.startCluster(); err != nil {
		_ = b.Stop(context.Background())
		return err
	}
	b.warnExposed()
	b.log.Info().Str("addr", b.Addr().String()).Str("data_dir", b.cfg.DataDir).Msg("broker accepting connections")
	if b.clustered() {
		return nil // serving once the member joined (serving, the Joined hook)
	}
	if b.cfg.AddrFile != "" {
		if err := writeAddrFile(b.cfg.AddrFile, b.Addr().String()); err != nil {
			_ = b.Stop(context.Background())
			return err
		}
	}
	b.joined.Store(true)
	return nil
}

// serving is the cluster node's Joined hook: a member serves (writes its
// address file, answers /ready, tells a stream it has not heard of from
// one that is not found) only once it has joined, so a script or
// orchestrator that waits for either finds stream admin and placement
// answering, not not_ready. A member whose etcd is down accepts
// connections meanwhile (and refuses what is clustered) but does not
// serve. Written at the first join only: a rejoin after a lost lease finds
// it there.
func (b *Broker) serving() {
	// After the join's DefsChanged (the Defs hook ran first, from the same
	// goroutine): the registry now answers a miss as not_found.
	b.system.Root.Send(b.registry, &streams.DefsLoaded{})
	if b.joined.Swap(true) || b.cfg.AddrFile == "" {
		return
	}
	if err := writeAddrFile(b.cfg.AddrFile, b.Addr().String()); err != nil {
		b.log.Error().Err(err).Str("addr_file", b.cfg.AddrFile).Msg("joined the cluster, but cannot write the address file")
		return
	}
	b.log.Info().Str("addr", b.Addr().String()).Str("addr_file", b.cfg.AddrFile).Msg("member serving")
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
		d, err := defstore.FromMeta(m)
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
	b.producers.Load(producers)
	return nil
}

// spawnTree spawns the top-level supervisors and the lanes.
func (b *Broker) spawnTree() error {
	root := b.system.Root
	var err error
	// spawn starts a top-level supervisor; props is built by mk with the
	// callback that captures its mailbox for the directory.
	spawnKind := func(name string, kind actors.Kind, labels map[string]string, mk func(created func(*actors.Mailbox)) *actor.Props) *actor.PID {
		if err != nil {
			return nil
		}
		var mb *actors.Mailbox
		var pid *actor.PID
		pid, err = root.SpawnNamed(mk(func(m *actors.Mailbox) { mb = m }), b.name+"/"+name)
		b.dir.Add(pid, kind, mb, labels)
		return pid
	}
	spawn := func(name string, labels map[string]string, mk func(created func(*actors.Mailbox)) *actor.Props) *actor.PID {
		return spawnKind(name, actors.KindSupervisor, labels, mk)
	}
	// The shards keep their paths under felix/streams; the definitions'
	// owner is a sibling, so its restart stops no shard.
	streamsCfg := b.registryConfig()
	b.shards = spawn("streams", children(actors.KindShard), func(created func(*actors.Mailbox)) *actor.Props {
		return streams.ShardSupervisorProps(streamsCfg, created)
	})
	b.sessions = spawn("sessions", children(actors.KindSession), b.supervisorProps(actors.KindSession))
	b.registry = spawnKind("registry", actors.KindRegistry, map[string]string{"owns": "stream_definitions"}, func(created func(*actors.Mailbox)) *actor.Props {
		return streams.RegistryProps(streamsCfg, b.shards, created)
	})
	b.subscribers = spawn("subscribers", children(actors.KindFeeder), b.supervisorProps(actors.KindFeeder))
	b.lanesSup = spawn("lanes", children(actors.KindLane), func(created func(*actors.Mailbox)) *actor.Props {
		return lanes.LaneSupervisorProps(lanes.LaneSupervisorConfig{
			Lanes: b.cfg.SubscriberWriterLanes, Lane: b.laneConfig(),
			OnSpawned: func(ref lanes.LaneRef) {
				b.dir.Add(ref.PID, actors.KindLane, ref.Mailbox, map[string]string{"lane": fmt.Sprint(ref.Index)})
			},
		}, created)
	})
	b.connections = spawn("connections", children(actors.KindConnWriter), b.supervisorProps(actors.KindConnWriter))
	b.groups = spawn("groups", children(actors.KindGroup), b.groupsSupervisorProps)
	b.streamFront = b.newStreamFront()
	b.groupFront = b.newGroupFront()
	b.cacheFront = b.newCacheFront()
	if err != nil {
		return fmt.Errorf("broker: spawn supervisors: %w", err)
	}
	// The supervisor spawns the lanes as it starts; asking for each
	// returns once they stand, so Start returns with every lane serving.
	b.lanes = make([]atomic.Pointer[lanes.LaneRef], b.cfg.SubscriberWriterLanes)
	for i := range b.lanes {
		if _, err := b.lane(context.Background(), i); err != nil {
			return fmt.Errorf("broker: spawn lanes: %w", err)
		}
	}
	return nil
}

// listen binds the felix/1 front end in front of the service.
func (b *Broker) listen() error {
	tlsConf, err := b.serverTLS()
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
	return b.admin.Addr()
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
// A Stop while another runs (the broker's own, after it lost a core actor)
// waits for that one, at most until ctx ends.
func (b *Broker) Stop(ctx context.Context) error {
	if !b.stopped.CompareAndSwap(false, true) {
		select {
		case <-b.stopDone:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	defer close(b.stopDone)
	close(b.stopping)
	// From here the admin endpoint's /ready answers 503 (adminMember.Ready).
	err := errors.Join(b.closeKafka(ctx), b.closeBrowser(ctx))
	if b.server != nil {
		err = errors.Join(err, b.server.Close(ctx))
	}
	err = errors.Join(err, b.stopCluster(ctx))
	b.stopActors()
	// After the shards: they send over the link until they stop.
	err = errors.Join(err, b.member.ClosePeers())
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
		err = errors.Join(err, b.admin.Close(ctx))
	}
	b.log.Info().Msg("broker stopped")
	return err
}

func (b *Broker) stopActors() {
	for _, pid := range []*actor.PID{b.coreWatch, b.sessions, b.connections, b.lanesSup, b.subscribers, b.groups, b.registry, b.shards} {
		if pid == nil {
			continue
		}
		if err := b.system.Root.StopFuture(pid).Wait(); err != nil && !errors.Is(err, actor.ErrTimeout) {
			b.log.Warn().Err(err).Str("actor", pid.Id).Msg("stop")
		}
	}
}

// lane returns lane i as its supervisor serves it: the cached ref while
// its lane runs, else the supervisor's, which has replaced a lane that
// stopped for good.
func (b *Broker) lane(ctx context.Context, i int) (lanes.LaneRef, error) {
	if ref := b.lanes[i].Load(); ref != nil && !ref.Mailbox.IsClosed() {
		return *ref, nil
	}
	ref, err := actors.Request[*lanes.LaneRef](actors.Detached(ctx), b.system.Root, b.lanesSup, &lanes.GetLane{Index: i}, requestTimeout)
	if err == nil {
		err = ref.Err
	}
	if err != nil {
		return lanes.LaneRef{}, err
	}
	b.lanes[i].Store(ref)
	return *ref, nil
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
			CacheResumeWindow: b.cfg.CacheResumeWindow,
			OnCacheCompacted:  b.countCacheCompaction,
			OnIdle: func(scope wire.Scope, shard uint32) {
				b.system.Root.Send(b.registry, &streams.ShardIdle{Scope: scope, Shard: shard})
			},
			BlockMaxWait:    b.cfg.SubscriberBlockMaxWait,
			RemoveShardData: b.member.RemoveShardData,
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
		OpenReplica:   b.member.OpenReplica,
		RemoveLogs:    b.logs.Remove,
		Root:          b.system.Root,
		OnStats:       b.countFanout,
		OnSpawned: func(pid *actor.PID, mb *actors.Mailbox, def streams.Def, shard uint32) {
			// A cache's shards are labelled cache, not stream, so the
			// tree tells them apart and each links to its own page.
			label := "stream"
			if def.Cache != nil {
				label = "cache"
			}
			b.dir.Add(pid, actors.KindShard, mb, map[string]string{label: def.Scope.String(), "shard": fmt.Sprint(shard)})
		},
		NotLoaded: b.defsNotLoaded(),
	}
}

// defsNotLoaded is what a cluster member's registry answers for a stream
// it has not heard of before it joined; nil on a single broker, whose
// definitions are loaded at start.
func (b *Broker) defsNotLoaded() func() error {
	if !b.clustered() {
		return nil
	}
	return func() error {
		member := "this member"
		if n := b.node.Load(); n != nil {
			member = "member " + n.ID()
		}
		return wire.NewError(wire.CodeShardUnavailable, "not_ready: %s has not joined the cluster yet, so it does not know the cluster's streams; try another member", member)
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
		return defstore.Cluster{Node: b.node.Load}
	}
	return defstore.Local{Store: b.store}
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
