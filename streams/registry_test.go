package streams

import (
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/wire"
)

// TestRegistryPanicKeepsShardsAndDefinitions: defect 2 of issue #9. The
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
	if res, err := Request[*StreamResult](sys.Root, reg, &CreateStream{Def: explicit}, eventTimeout); err != nil || res.Err != nil {
		t.Fatalf("create: %v %v", err, res)
	}
	before, err := Lookup(sys.Root, reg, testScope, 1, eventTimeout)
	if err != nil {
		t.Fatal(err)
	}
	sub := &testShard{sys: sys, ref: before}
	f := sub.addFeeder(t, 1, actors.MailboxConfig{Capacity: 16})

	sys.Root.Send(reg, &actors.ChaosPanic{Reason: "test"})
	// The registry answers again once restarted; its mailbox kept the request.
	res, err := Request[*StreamResult](sys.Root, reg, &GetStream{Scope: testScope}, eventTimeout)
	if err != nil || res.Err != nil || res.Def.Shards != 2 || res.Def.Implicit {
		t.Fatalf("after the registry's restart: %+v, %v; want the explicit 2-shard definition", res, err)
	}
	if before.Mailbox.IsClosed() {
		t.Fatal("a panic in the registry stopped an existing shard")
	}
	after, err := Lookup(sys.Root, reg, testScope, 1, eventTimeout)
	if err != nil || !after.PID.Equal(before.PID) {
		t.Fatalf("lookup after the restart: %v, %v; want the same shard %s", after, err, before.PID)
	}
	if r := answer(t, sub.publish(t, nil, "still here")); r.Err != nil {
		t.Fatalf("publish after the registry's restart: %+v", r)
	}
	if env := f.nextEnv(t); string(env.Payloads[0]) != "still here" {
		t.Fatalf("subscriber got %q", env.Payloads[0])
	}
	if _, err := Lookup(sys.Root, reg, testScope, 2, eventTimeout); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("shard 2 of a 2-shard stream: %v; want not_found", err)
	}
}

// TestRegistryRefusesNegativeRetention: whatever front end made the
// definition, a negative retention (a conversion that wrapped, issue 11) is
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
		res, err := Request[*StreamResult](sys.Root, reg, &CreateStream{Def: d}, eventTimeout)
		if err != nil || !errors.Is(res.Err, wire.ErrInvalidRequest) {
			t.Fatalf("create %+v: %+v, %v; want invalid_request", d, res, err)
		}
	}
	if res, _ := Request[*StreamResult](sys.Root, reg, &GetStream{Scope: testScope}, eventTimeout); !errors.Is(res.Err, wire.ErrNotFound) {
		t.Fatalf("after the refused creates: %+v; want not_found", res)
	}
}
