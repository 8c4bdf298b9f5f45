package streams

import (
	"errors"
	"sort"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/cache"
	"github.com/getfelix/felix-go/routing"
	"github.com/getfelix/felix-go/wire"
)

// MaxShards bounds a stream's shard count.
const MaxShards = 1024

// Def is a stream's definition.
type Def struct {
	Scope          wire.Scope
	Shards         uint32
	Routing        routing.Routing
	Durable        bool
	RetentionBytes int64
	RetentionAge   time.Duration
	// Replicas is a durable stream's replication factor in a cluster: with
	// more than one, each shard is a raft group over that many members.
	// Zero or one: one copy, on its home member.
	Replicas int
	// LogAppendTime: records keep their append time only, never a
	// producer's (service.StreamSpec.LogAppendTime).
	LogAppendTime bool
	// Compression is the Kafka listener's Fetch codec
	// (service.StreamSpec.Compression).
	Compression string
	// Implicit marks an in-memory, one-shard stream made by its first
	// publish or subscribe. It is not stored: it vanishes with the broker.
	Implicit  bool
	CreatedAt time.Time
	// Cache, when set, makes the stream a cache (cache.go).
	Cache *CacheSettings
}

// SameSettings reports whether a create request matches an existing stream,
// so a repeated create is idempotent and a conflicting one is refused.
func (d Def) SameSettings(o Def) bool {
	return d.Shards == o.Shards && d.Routing == o.Routing && d.Durable == o.Durable &&
		d.RetentionBytes == o.RetentionBytes && d.RetentionAge == o.RetentionAge &&
		max(d.Replicas, 1) == max(o.Replicas, 1) && d.LogAppendTime == o.LogAppendTime && d.Compression == o.Compression &&
		(d.Cache == nil) == (o.Cache == nil) && (d.Cache == nil || *d.Cache == *o.Cache)
}

// Replicated reports whether the stream's shards are raft groups.
func (d Def) Replicated() bool { return d.Durable && d.Replicas > 1 }

// DefStore keeps explicit stream definitions across restarts. The registry
// calls it inside Receive: stream administration is rare and must be
// serialised with shard lookups, and the registry has no children, so a
// failure here costs no subscription. Never on the publish path.
type DefStore interface {
	PutStream(Def) error
	DeleteStream(Def) error
}

// ImplicitStore is a DefStore that keeps implicit streams too (a
// cluster's etcd: every member must agree on a stream made by a first
// publish). PutImplicit stores d unless a definition exists, and returns
// the one stored, which the registry takes instead of d.
type ImplicitStore interface {
	DefStore
	PutImplicit(d Def) (Def, error)
}

// Messages the registry accepts besides GetShard. Each is a request: the
// registry responds with *StreamResult or *StreamListResult.

// CreateStream creates a stream, or confirms an identical one. DryRun
// makes every check and stores nothing (answering the definition it
// would have stored).
type CreateStream struct {
	actors.ControlMessage
	Def    Def
	DryRun bool
}

// GetStream returns a stream's definition, creating an implicit in-memory
// stream on first use when Create is set.
type GetStream struct {
	actors.ControlMessage
	Scope  wire.Scope
	Create bool
}

// ListStreams lists a tenant's streams, optionally of one namespace.
type ListStreams struct {
	actors.ControlMessage
	Tenant, Namespace string
}

// DeleteStream deletes a stream and stops its shards (their subscriptions
// end with an error to their clients).
type DeleteStream struct {
	actors.ControlMessage
	Scope wire.Scope
}

// StreamResult answers CreateStream, GetStream and DeleteStream.
type StreamResult struct {
	Def Def
	Err error
}

// StreamListResult answers ListStreams.
type StreamListResult struct {
	Defs []Def
	Err  error
}

func (r *registry) handleCreateStream(ctx actor.Context, msg *CreateStream) {
	d, err := r.checkDef(msg.Def)
	if err != nil {
		ctx.Respond(&StreamResult{Err: err})
		return
	}
	if old, ok := r.defs[d.Scope]; ok && !old.Implicit {
		if old.SameSettings(d) {
			ctx.Respond(&StreamResult{Def: old})
			return
		}
		ctx.Respond(&StreamResult{Err: wire.NewError(wire.CodeInvalidRequest,
			"stream %s exists with other settings (%d shards, %s routing); delete it first or create it with the same settings", d.Scope, old.Shards, old.Routing)})
		return
	} else if ok && old.Implicit && d.Shards != 1 {
		// An implicit stream has one shard live; growing it in place would
		// move keys under running subscriptions.
		ctx.Respond(&StreamResult{Err: wire.NewError(wire.CodeInvalidRequest,
			"stream %s is already in use as an implicit one-shard stream; create streams before first use, or delete it first", d.Scope)})
		return
	}
	if _, replaces := r.defs[d.Scope]; !replaces {
		if err := r.admit(d.Scope); err != nil {
			ctx.Respond(&StreamResult{Err: err})
			return
		}
	}
	d.Implicit = false
	if d.CreatedAt.IsZero() {
		d.CreatedAt = time.Now().UTC()
	}
	if msg.DryRun {
		ctx.Respond(&StreamResult{Def: d})
		return
	}
	if r.cfg.Store != nil {
		if err := r.cfg.Store.PutStream(d); err != nil {
			ctx.Respond(&StreamResult{Err: storeErr(err)})
			return
		}
	}
	r.put(d)
	ctx.Respond(&StreamResult{Def: d})
}

// checkDef checks a new definition's own settings, whatever is defined
// already, and fills in a cache's default history.
func (r *registry) checkDef(d Def) (Def, error) {
	if err := d.Scope.Validate(); err != nil {
		return d, err
	}
	if d.Shards < 1 || d.Shards > MaxShards {
		return d, wire.NewError(wire.CodeInvalidRequest, "shards must be 1 to %d, got %d", MaxShards, d.Shards)
	}
	// An old definition, or a create that names none, keeps one change.
	if d.Cache != nil && d.Cache.History == 0 {
		c := *d.Cache // the message's, never written
		c.History = cache.DefaultHistory
		d.Cache = &c
	}
	switch {
	case d.Cache != nil && (d.Cache.History < 1 || d.Cache.History > cache.MaxHistory):
		return d, wire.NewError(wire.CodeInvalidRequest, "a cache's history must be 1 to %d, got %d", cache.MaxHistory, d.Cache.History)
	case d.RetentionBytes < 0 || d.RetentionAge < 0:
		// Every front end converts its own units; a negative value here is
		// one that wrapped, and 0, not a huge number, is for ever.
		return d, wire.NewError(wire.CodeInvalidRequest,
			"retention must not be negative (retention_bytes %d, retention_age %s); 0 keeps everything", d.RetentionBytes, d.RetentionAge)
	case d.Durable && r.cfg.OpenLog == nil:
		return d, wire.NewError(wire.CodeInvalidRequest, "this broker has no durable storage")
	case d.Cache != nil && (d.RetentionBytes > 0 || d.RetentionAge > 0 || d.Cache.TTL < 0):
		// Retention deletes whole segments: on a cache it would delete
		// keys, whatever their age. A cache's records go by compaction.
		return d, wire.NewError(wire.CodeInvalidRequest,
			"a cache takes no retention and no negative ttl (retention_bytes %d, retention_age %s, ttl %s)", d.RetentionBytes, d.RetentionAge, d.Cache.TTL)
	case !d.Durable && (d.RetentionBytes > 0 || d.RetentionAge > 0):
		// Accepting it would be a setting that does nothing: an in-memory
		// stream keeps only its replay ring, bounded by the ring's knobs.
		return d, wire.NewError(wire.CodeInvalidRequest,
			"retention applies to durable streams; an in-memory stream keeps only its replay ring (replay_ring_records, replay_ring_max_bytes)")
	}
	return d, nil
}

// admit asks whether scope's tenant may have one more stream.
func (r *registry) admit(scope wire.Scope) error {
	if r.cfg.CheckStreams == nil {
		return nil
	}
	return r.cfg.CheckStreams(scope.Tenant, r.perTenant[scope.Tenant])
}

// put sets a definition, counting a new one against its tenant.
func (r *registry) put(d Def) {
	if _, ok := r.defs[d.Scope]; !ok {
		r.perTenant[d.Scope.Tenant]++
	}
	r.defs[d.Scope] = d
}

// remove forgets a definition.
func (r *registry) remove(scope wire.Scope) {
	if _, ok := r.defs[scope]; !ok {
		return
	}
	delete(r.defs, scope)
	if r.perTenant[scope.Tenant]--; r.perTenant[scope.Tenant] <= 0 {
		delete(r.perTenant, scope.Tenant)
	}
}

func (r *registry) handleGetStream(ctx actor.Context, msg *GetStream) {
	d, err := r.def(msg.Scope, msg.Create)
	ctx.Respond(&StreamResult{Def: d, Err: err})
}

// def returns scope's definition, making an implicit one when create is set.
func (r *registry) def(scope wire.Scope, create bool) (Def, error) {
	if d, ok := r.defs[scope]; ok {
		return d, nil
	}
	if r.awaiting {
		return Def{}, r.cfg.NotLoaded()
	}
	if !create {
		return Def{}, wire.NewError(wire.CodeNotFound, "no stream %s", scope)
	}
	if err := scope.Validate(); err != nil {
		return Def{}, err
	}
	if err := r.admit(scope); err != nil {
		return Def{}, err
	}
	d := Def{Scope: scope, Shards: 1, Implicit: true, CreatedAt: time.Now().UTC()}
	if store, ok := r.cfg.Store.(ImplicitStore); ok {
		stored, err := store.PutImplicit(d)
		if err != nil {
			return Def{}, err
		}
		d = stored
	}
	r.put(d)
	return d, nil
}

func (r *registry) handleListStreams(ctx actor.Context, msg *ListStreams) {
	if r.awaiting {
		ctx.Respond(&StreamListResult{Err: r.cfg.NotLoaded()})
		return
	}
	var out []Def
	for s, d := range r.defs {
		if s.Tenant == msg.Tenant && (msg.Namespace == "" || s.Namespace == msg.Namespace) {
			out = append(out, d)
		}
	}
	sortDefs(out)
	ctx.Respond(&StreamListResult{Defs: out})
}

func (r *registry) handleDeleteStream(ctx actor.Context, msg *DeleteStream) {
	d, ok := r.defs[msg.Scope]
	if !ok {
		var err error = wire.NewError(wire.CodeNotFound, "no stream %s", msg.Scope)
		if r.awaiting {
			err = r.cfg.NotLoaded()
		}
		ctx.Respond(&StreamResult{Err: err})
		return
	}
	_, keepsImplicit := r.cfg.Store.(ImplicitStore)
	if r.cfg.Store != nil && (!d.Implicit || keepsImplicit) {
		if err := r.cfg.Store.DeleteStream(d); err != nil {
			ctx.Respond(&StreamResult{Err: storeErr(err)})
			return
		}
	}
	r.remove(msg.Scope)
	// The supervisor answers the requester once the shards refuse new
	// publishes, so a publish that starts after the delete returned never
	// lands in the deleted stream.
	ctx.RequestWithCustomSender(r.shards, &stopShards{scope: msg.Scope, def: d}, ctx.Sender())
	if d.Durable && r.cfg.RemoveLogs != nil {
		r.cfg.RemoveLogs(d)
	}
}

// storeErr reports a DefStore failure: a store that answers with a wire
// error (a cluster's, which may refuse a conflicting create) is passed on;
// anything else is a storage error.
func storeErr(err error) error {
	var we *wire.Error
	if errors.As(err, &we) {
		return we
	}
	return wire.WrapError(wire.CodeStorage, err, "stream definitions")
}

func sortDefs(defs []Def) {
	sort.Slice(defs, func(i, j int) bool { return defs[i].Scope.String() < defs[j].Scope.String() })
}
