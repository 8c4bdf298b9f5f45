package broker

import (
	"context"
	"fmt"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/admin"
	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/authgate"
	"github.com/getfelix/felix-go/cluster"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/wire"
)

// The broker's side of the admin endpoint (package admin): it starts the
// endpoint with itself as the admin.Member the routes ask, and answers for
// the tree, the chaos routes and a stream's internals.

// The tree's and the kill's types and errors are the actor kit's, and
// ErrChaosOff and DiskRequest admin's; these names keep the broker's API as
// it was.
type (
	// ActorInfo is one node of the supervision tree as /debug/actors serves it.
	ActorInfo = actors.Info
	// KillRequest asks Kill (or the chaos route) to crash or stop actors.
	KillRequest = actors.KillRequest
	// KillResult names what Kill killed.
	KillResult = actors.KillResult
	// DiskRequest asks POST /debug/chaos/disk to make the durable logs'
	// disk fail (Fail true) or work again.
	DiskRequest = admin.DiskRequest
)

// Errors of Kill and FailDisk, which the chaos routes answer each with
// its own status.
var (
	ErrChaosOff       = admin.ErrChaosOff
	ErrNoSuchActor    = actors.ErrNoSuchActor
	ErrNotKillable    = actors.ErrNotKillable
	ErrBadKillRequest = actors.ErrBadKillRequest
)

// startAdmin starts the admin endpoint on cfg.Admin.
func (b *Broker) startAdmin() error {
	srv, err := admin.Start(admin.Config{
		Addr:         b.cfg.Admin,
		Metrics:      b.metrics.Registry,
		Log:          b.log,
		Chaos:        b.cfg.Chaos,
		NeedToken:    b.cfg.Auth != "none",
		Pprof:        b.cfg.Pprof,
		AllowedHosts: b.cfg.AdminHosts(),
		Rates:        &b.fanoutRates,
		BrowserPort:  func() int { return int(b.browserPort.Load()) },
		BrowserTLS:   b.cfg.BrowserTLS,
		WebTransport: b.browserWebTransport,
		Refused:      func(reason string) { b.metrics.AuthRefused.WithLabelValues(reason).Inc() },
	}, adminMember{b})
	if err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	b.admin = srv
	return nil
}

// adminMember is the broker as the admin routes see it. Its own methods
// are the ones the broker does not export.
type adminMember struct{ *Broker }

var (
	_ admin.Member  = adminMember{}
	_ admin.Cluster = (*cluster.Node)(nil)
)

// Ready: a single broker from Start, a member while it is in the cluster
// (joined, and not joining again after a lost lease), until Stop begins.
func (m adminMember) Ready() bool {
	if m.stopped.Load() || !m.joined.Load() {
		return false
	}
	node := m.node.Load()
	return node == nil || node.Ready()
}

// Session is a connection-less conn with every right on tenant: the route
// checked the admin token already.
func (m adminMember) Session(tenant string) service.Session { return m.adminConn(tenant) }

func (m adminMember) ShardOffsets(ctx context.Context, scope wire.Scope, shard uint32) (admin.LogOffsets, error) {
	ref, err := m.adminConn(scope.Tenant).shard(ctx, scope, shard)
	if err != nil {
		return admin.LogOffsets{}, err
	}
	log, err := ref.Log(ctx)
	if err != nil {
		return admin.LogOffsets{}, err
	}
	return admin.LogOffsets{First: log.StartOffset(), Next: log.NextOffset(), Committed: log.Committed()}, nil
}

// Cluster is nil, not a nil *cluster.Node, on a single broker: an
// interface holding a nil pointer is not nil.
func (m adminMember) Cluster() admin.Cluster {
	if n := m.node.Load(); n != nil {
		return n
	}
	return nil
}

// adminConn is a connection-less conn for the admin routes, with every
// right on tenant. It has no session actor: Close does nothing.
func (b *Broker) adminConn(tenant string) *conn {
	return b.newConn(service.Client{Tenant: tenant}, &auth.Principal{Tenant: tenant, Grants: auth.AdminGrants(), Expires: authgate.NoExpiry})
}

// Actors lists the live supervision tree, parents before children, from
// the broker's directory (actors.Directory.Tree).
func (b *Broker) Actors() []ActorInfo { return b.dir.Tree() }

// Kill crashes or stops actors as req says (actors.Kill). It refuses
// with ErrChaosOff unless the broker was started with chaos enabled.
func (b *Broker) Kill(req KillRequest) (KillResult, error) {
	if !b.cfg.Chaos {
		return KillResult{}, ErrChaosOff
	}
	res, err := actors.Kill(b.system.Root, b.dir, req)
	if err != nil {
		return KillResult{}, err
	}
	b.log.Warn().Strs("actors", res.Killed).Str("mode", res.Mode).Msg("chaos kill")
	return res, nil
}

// FailDisk makes every durable log's writes fail (or work again), as a
// failing disk would. Only with --chaos (ErrChaosOff otherwise).
func (b *Broker) FailDisk(fail bool) error {
	if !b.cfg.Chaos {
		return ErrChaosOff
	}
	b.disk.SetFailing(fail)
	b.log.Warn().Bool("failing", fail).Msg("chaos: the durable logs' disk fails writes")
	return nil
}

func (m adminMember) CacheStatus(ctx context.Context, scope wire.Scope, shard uint32) (admin.CacheShardStatus, error) {
	ref, err := m.adminConn(scope.Tenant).shard(ctx, scope, shard)
	if err != nil {
		return admin.CacheShardStatus{}, err
	}
	if ref.Durable {
		if _, err := ref.Log(ctx); err != nil { // opened, so the index is rebuilt
			return admin.CacheShardStatus{}, err
		}
	}
	res, err := actors.Request[*streams.CacheStatusResult](actors.Detached(ctx), m.system.Root, ref.PID, &streams.CacheStatus{}, requestTimeout)
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return admin.CacheShardStatus{}, err
	}
	st := admin.CacheShardStatus{
		Keys: res.Keys, Tombstones: res.Tombstones, Counters: res.Counters, Watchers: res.Watchers,
		Writes: res.Writes, Reads: res.Reads, Floor: res.Floor, LogRecords: res.LogRecords,
		Compacting: res.Compacting, Compactions: res.Compactions,
	}
	if res.HasApplied {
		st.Applied = &res.Applied
	}
	if c := res.LastCompaction; c != nil {
		st.LastCompaction = &admin.CompactionView{
			At: res.LastCompactionAt, Horizon: c.Horizon, RecordsRemoved: c.RecordsRemoved, BytesRemoved: c.BytesRemoved,
			TookMillis: float64(c.Took.Microseconds()) / 1e3,
		}
	}
	return st, nil
}
