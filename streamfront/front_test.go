package streamfront

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/routing"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/wire"
)

// fakeConn is a connection whose principal is p, checked as the broker
// checks it (no reserved names or expiry here: authgate's), and whose
// registry answers from defs and records what it was asked.
type fakeConn struct {
	p        *auth.Principal
	defs     []streams.Def
	asked    []any
	forgot   []wire.Scope
	deleted  []wire.Scope // DeleteStateOf
	registry error        // the registry's answer to every request
}

func (c *fakeConn) Authorize(a auth.Action, scope wire.Scope) error { return c.p.Check(a, scope) }
func (c *fakeConn) Principal() *auth.Principal                      { return c.p }
func (c *fakeConn) Forget(scope wire.Scope)                         { c.forgot = append(c.forgot, scope) }

func (c *fakeConn) Registry(_ context.Context, msg any) (streams.Def, error) {
	c.asked = append(c.asked, msg)
	if cs, ok := msg.(*streams.CreateStream); ok {
		return cs.Def, c.registry
	}
	return streams.Def{}, c.registry
}

func (c *fakeConn) List(_ context.Context, tenant, _ string) ([]streams.Def, error) {
	return c.defs, c.registry
}

func (c *fakeConn) DeleteStateOf(_ context.Context, scope wire.Scope) error {
	c.deleted = append(c.deleted, scope)
	return nil
}

func principal(grants ...string) *auth.Principal {
	p := &auth.Principal{Tenant: "t", Expires: time.Now().Add(time.Hour)}
	for _, g := range grants {
		p.Grants = append(p.Grants, auth.MustParseGrant(g))
	}
	return p
}

func scope(stream string) wire.Scope { return wire.Scope{Tenant: "t", Namespace: "ns", Stream: stream} }

func session(c Conn) Session {
	return New(Config{ReplicasFor: func(spec *service.StreamSpec) (int, error) {
		if spec.Replicas > 1 {
			return 0, wire.NewError(wire.CodeInvalidRequest, "a single broker keeps one replica")
		}
		return 1, nil
	}}).Session(c)
}

// TestCreateStreamRefusals: a create is refused at the boundary, before
// the registry is asked, for a missing right and for each setting a
// stream cannot have.
func TestCreateStreamRefusals(t *testing.T) {
	tests := []struct {
		name string
		give service.StreamSpec
		want error
	}{
		{"no right", service.StreamSpec{Scope: wire.Scope{Tenant: "t", Namespace: "other", Stream: "s"}}, wire.ErrForbidden},
		{"bad name", service.StreamSpec{Scope: scope("a b")}, wire.ErrInvalidRequest},
		{"routing", service.StreamSpec{Scope: scope("s"), Routing: "round-robin"}, wire.ErrInvalidRequest},
		{"negative retention", service.StreamSpec{Scope: scope("s"), Durable: true, RetentionAge: -time.Second}, wire.ErrInvalidRequest},
		{"log append time in memory", service.StreamSpec{Scope: scope("s"), LogAppendTime: true}, wire.ErrInvalidRequest},
		{"compression in memory", service.StreamSpec{Scope: scope("s"), Compression: "gzip"}, wire.ErrInvalidRequest},
		{"unknown codec", service.StreamSpec{Scope: scope("s"), Durable: true, Compression: "brotli"}, wire.ErrInvalidRequest},
		{"replicas", service.StreamSpec{Scope: scope("s"), Durable: true, Replicas: 3}, wire.ErrInvalidRequest},
	}
	for _, tt := range tests {
		c := &fakeConn{p: principal("stream.manage:ns/*")}
		_, err := session(c).CreateStream(context.Background(), &tt.give)
		if !errors.Is(err, tt.want) || len(c.asked) != 0 {
			t.Errorf("%s: CreateStream(%+v) = %v, registry asked %d times; want %v, not asked", tt.name, tt.give, err, len(c.asked), tt.want)
		}
	}
}

// TestCreateStream: a valid create is asked of the registry as the
// definition it makes, the connection forgets what it knew of the stream,
// and a dry run stores nothing.
func TestCreateStream(t *testing.T) {
	c := &fakeConn{p: principal("stream.manage:ns/*")}
	spec := &service.StreamSpec{Scope: scope("s"), Shards: 4, Durable: true, Routing: "jump", Compression: service.CompressionNone, RetentionAge: time.Hour}
	info, err := session(c).CreateStream(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	want := streams.Def{Scope: scope("s"), Shards: 4, Durable: true, Routing: routing.RouteJump, Compression: service.CompressionNone, RetentionAge: time.Hour, Replicas: 1}
	if got := c.asked[0].(*streams.CreateStream); got.DryRun || got.Def != want {
		t.Errorf("the registry was asked %+v, want %+v (no dry run)", got, want)
	}
	if info.Routing != "jump" || info.Replicas != 1 || !slices.Equal(c.forgot, []wire.Scope{scope("s")}) {
		t.Errorf("info %+v, forgot %v; want jump routing, 1 replica, s forgotten", info, c.forgot)
	}
	if err := session(c).CheckCreateStream(context.Background(), spec); err != nil || !c.asked[1].(*streams.CreateStream).DryRun {
		t.Errorf("CheckCreateStream = %v, asked %+v; want a dry run", err, c.asked[1])
	}
}

// TestStreamsListsWhatThePrincipalMaySee: a listing holds the streams the
// principal has any stream right on, never the broker's own; another
// tenant's listing is refused as any other of its operations is.
func TestStreamsListsWhatThePrincipalMaySee(t *testing.T) {
	c := &fakeConn{p: principal("stream.subscribe:ns/a*"), defs: []streams.Def{
		{Scope: scope("ab")}, {Scope: scope("b")}, {Scope: scope(wire.GroupStreamPrefix + "ab")},
	}}
	got, err := session(c).Streams(context.Background(), "t", "ns")
	if err != nil || len(got) != 1 || got[0].Scope != scope("ab") {
		t.Errorf("Streams = %+v, %v; want only ab", got, err)
	}
	if _, err := session(c).Streams(context.Background(), "other", "ns"); !errors.Is(err, wire.ErrForbidden) {
		t.Errorf("another tenant's Streams = %v; want forbidden", err)
	}
	if _, err := session(c).Stream(context.Background(), scope("ab")); err != nil {
		t.Errorf("Stream(ab) with subscribe only = %v; want its definition", err)
	}
	if _, err := session(c).Stream(context.Background(), scope("b")); !errors.Is(err, wire.ErrForbidden) {
		t.Errorf("Stream(b) with no right on it = %v; want forbidden", err)
	}
}

// TestDeleteStream: a delete takes the stream's groups' state with it,
// and only once the registry deleted the stream; the connection forgets
// the stream either way.
func TestDeleteStream(t *testing.T) {
	c := &fakeConn{p: principal("stream.manage:ns/*")}
	if err := session(c).DeleteStream(context.Background(), scope("s")); err != nil || !slices.Equal(c.deleted, []wire.Scope{scope("s")}) {
		t.Errorf("DeleteStream = %v, groups' state deleted for %v; want nil and s", err, c.deleted)
	}
	c = &fakeConn{p: principal("stream.manage:ns/*"), registry: wire.NewError(wire.CodeNotFound, "no stream")}
	if err := session(c).DeleteStream(context.Background(), scope("s")); !errors.Is(err, wire.ErrNotFound) || len(c.deleted) != 0 || len(c.forgot) != 1 {
		t.Errorf("DeleteStream of a missing stream = %v, state deleted %v, forgot %v; want not_found, none, s", err, c.deleted, c.forgot)
	}
}
