package streams

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/wire"
)

// TestRegistryPanicKeepsShardsAndDefinitions: the
// registry used to be the shards' parent, and protoactor stops every child
// on a restart, so one panic in it (it does bbolt I/O) ended every
// subscription. Now the shards hang under their own supervisor: a panic in
// the registry leaves them running, and the definitions survive (same
// instance).
func TestRegistryPanicKeepsShardsAndDefinitions(t *testing.T) {
	sys := newSystem(t)
	rc := RegistryConfig{PubQueueDepth: 8, Log: zerolog.Nop(), Root: sys.Root}
	shards := spawnSupervisor(t, sys, rc)
	reg, err := sys.Root.SpawnNamed(RegistryProps(rc, shards, nil), "registry")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Root.StopFuture(reg).Wait() })

	explicit := Def{Scope: testScope, Shards: 2}
	if res, err := actors.Request[*StreamResult](context.Background(), sys.Root, reg, &CreateStream{Def: explicit}, eventTimeout); err != nil || res.Err != nil {
		t.Fatalf("create: %v %v", err, res)
	}
	before, err := lookup(sys.Root, reg, testScope, 1)
	if err != nil {
		t.Fatal(err)
	}
	sub := &testShard{sys: sys, ref: before}
	f := sub.addFeeder(t, 1, actors.MailboxConfig{Capacity: 16})

	sys.Root.Send(reg, &actors.ChaosPanic{Reason: "test"})
	// The registry answers again once restarted; its mailbox kept the request.
	res, err := actors.Request[*StreamResult](context.Background(), sys.Root, reg, &GetStream{Scope: testScope}, eventTimeout)
	if err != nil || res.Err != nil || res.Def.Shards != 2 || res.Def.Implicit {
		t.Fatalf("after the registry's restart: %+v, %v; want the explicit 2-shard definition", res, err)
	}
	if before.Mailbox.IsClosed() {
		t.Fatal("a panic in the registry stopped an existing shard")
	}
	after, err := lookup(sys.Root, reg, testScope, 1)
	if err != nil || !after.PID.Equal(before.PID) {
		t.Fatalf("lookup after the restart: %v, %v; want the same shard %s", after, err, before.PID)
	}
	if r := answer(t, sub.publish(t, nil, "still here")); r.Err != nil {
		t.Fatalf("publish after the registry's restart: %+v", r)
	}
	if env := f.nextEnv(t); string(env.Payloads[0]) != "still here" {
		t.Fatalf("subscriber got %q", env.Payloads[0])
	}
	if _, err := lookup(sys.Root, reg, testScope, 2); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("shard 2 of a 2-shard stream: %v; want not_found", err)
	}
}

// TestRegistryRefusesNegativeRetention: whatever front end made the
// definition, a negative retention (a conversion that wrapped) is
// refused, not stored as "delete at once" or "keep for ever".
func TestRegistryRefusesNegativeRetention(t *testing.T) {
	sys := newSystem(t)
	rc := RegistryConfig{PubQueueDepth: 8, Log: zerolog.Nop(), Root: sys.Root, OpenLog: func(Def, uint32) (Log, bool, error) { return nil, false, errors.New("unused") }}
	shards := spawnSupervisor(t, sys, rc)
	reg, err := sys.Root.SpawnNamed(RegistryProps(rc, shards, nil), "registry")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Root.StopFuture(reg).Wait() })
	for _, d := range []Def{
		{Scope: testScope, Shards: 1, Durable: true, RetentionAge: -time.Millisecond},
		{Scope: testScope, Shards: 1, Durable: true, RetentionBytes: -1},
	} {
		res, err := actors.Request[*StreamResult](context.Background(), sys.Root, reg, &CreateStream{Def: d}, eventTimeout)
		if err != nil || !errors.Is(res.Err, wire.ErrInvalidRequest) {
			t.Fatalf("create %+v: %+v, %v; want invalid_request", d, res, err)
		}
	}
	if res, _ := actors.Request[*StreamResult](context.Background(), sys.Root, reg, &GetStream{Scope: testScope}, eventTimeout); !errors.Is(res.Err, wire.ErrNotFound) {
		t.Fatalf("after the refused creates: %+v; want not_found", res)
	}
}

// lookup asks the registry for a shard, as the broker does.
func lookup(root *actor.RootContext, reg *actor.PID, scope wire.Scope, shard uint32) (*ShardRef, error) {
	ref, err := actors.Request[*ShardRef](context.Background(), root, reg, &GetShard{Scope: scope, Shard: shard}, eventTimeout)
	if err == nil && ref.Err != nil {
		err = ref.Err
	}
	return ref, err
}

// TestRegistryAwaitingDefinitions: a cluster member's registry, until the
// cluster's definitions are loaded, answers a stream it has not heard of
// not_ready (get, first use, shard lookup, delete and list alike), never
// not_found or a new implicit stream; once DefsLoaded follows the
// definitions, a miss is not_found and a sent definition is served.
func TestRegistryAwaitingDefinitions(t *testing.T) {
	sys := newSystem(t)
	rc := RegistryConfig{PubQueueDepth: 8, Log: zerolog.Nop(), Root: sys.Root, NotLoaded: func() error {
		return wire.NewError(wire.CodeShardUnavailable, "not_ready: member m has not joined the cluster yet")
	}}
	shards := spawnSupervisor(t, sys, rc)
	reg, err := sys.Root.SpawnNamed(RegistryProps(rc, shards, nil), "registry")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Root.StopFuture(reg).Wait() })
	ask := func(msg any) error {
		res, err := actors.Request[*StreamResult](context.Background(), sys.Root, reg, msg, eventTimeout)
		if err != nil {
			t.Fatal(err)
		}
		return res.Err
	}
	notReady := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(err.Error(), "not_ready") {
			t.Fatalf("%s before the definitions loaded: %v; want shard_unavailable not_ready", what, err)
		}
	}
	notReady("get", ask(&GetStream{Scope: testScope}))
	notReady("first use", ask(&GetStream{Scope: testScope, Create: true}))
	notReady("delete", ask(&DeleteStream{Scope: testScope}))
	_, err = lookup(sys.Root, reg, testScope, 0)
	notReady("shard lookup", err)
	list, err := actors.Request[*StreamListResult](context.Background(), sys.Root, reg, &ListStreams{Tenant: testScope.Tenant}, eventTimeout)
	if err != nil {
		t.Fatal(err)
	}
	notReady("list", list.Err)

	other := wire.Scope{Tenant: testScope.Tenant, Namespace: testScope.Namespace, Stream: "other"}
	sys.Root.Send(reg, &DefsChanged{Put: []Def{{Scope: other, Shards: 1}}})
	sys.Root.Send(reg, &DefsLoaded{})
	if err := ask(&GetStream{Scope: other}); err != nil {
		t.Fatalf("a loaded definition: %v", err)
	}
	if err := ask(&GetStream{Scope: testScope}); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("a stream the loaded definitions lack: %v; want not_found", err)
	}
}
