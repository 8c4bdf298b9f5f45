package transport

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/internal/quicconf"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// These tests serve a fake session (no broker) to a client speaking raw
// frames, so they can offer any feature set and see exactly what the
// transport writes: shard_owners answered only under FeatureShardOwners,
// an error's owner sent only under FeatureRedirect.

// movedOwner is the member the fake session says owns every shard.
var movedOwner = wire.Owner{NodeID: "node-2", Addr: "10.0.0.2:5000", Generation: 7}

// notLeader is the fake session's refusal: go to movedOwner.
func notLeader() *wire.Error {
	e := wire.NewError(wire.CodeNotLeader, "shard 0 is owned by node-2")
	e.Owner = &movedOwner
	return e
}

// ownersSession answers ShardOwners with a fixed topology (or, for stream
// "moved", not_leader) and refuses every acked publish with not_leader.
// The Session it embeds is nil: any other call panics, so a test that
// reaches one fails loudly.
type ownersSession struct{ service.Session }

var ownersTopology = service.Topology{
	Shards: 2, Routing: "jump", Durable: true,
	Owners: []wire.ShardOwner{
		{Shard: 0, Owner: wire.Owner{NodeID: "node-1", Addr: "10.0.0.1:5000", Generation: 3}, Available: true},
		{Shard: 1, Owner: movedOwner},
	},
}

func (ownersSession) ShardOwners(_ context.Context, scope wire.Scope) (*service.Topology, error) {
	if scope.Stream == "moved" {
		return nil, notLeader()
	}
	top := ownersTopology
	top.Scope = scope
	return &top, nil
}

func (ownersSession) Publish(_ context.Context, _ *service.Publish, done func(service.PublishResult)) error {
	if done == nil {
		return notLeader()
	}
	done(service.PublishResult{Err: notLeader()})
	return nil
}

func (ownersSession) Close() {}

type ownersService struct{}

func (ownersService) Open(context.Context, service.Client) (service.Session, error) {
	return ownersSession{}, nil
}

// rawClient is one handshaken connection's control stream.
type rawClient struct {
	st *quic.Stream
	fr *wire.FrameReader
}

// startOwners serves ownersService and connects a raw client offering
// features; both end with the test.
func startOwners(t *testing.T, features uint32) *rawClient {
	t.Helper()
	dir := t.TempDir()
	serverTLS, err := quicconf.ServerTLS("", "", dir)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := Listen("127.0.0.1:0", serverTLS, Config{
		MaxFrameBytes: 1 << 20, PreAuthMaxFrameBytes: 64 << 10, AuthTimeout: 5 * time.Second,
		PublishWindow: 16, Log: zerolog.Nop(),
	}, ownersService{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Close(ctx); err != nil {
			t.Errorf("Server.Close: %v", err)
		}
	})
	clientTLS, err := quicconf.ClientTLS(filepath.Join(dir, quicconf.CertFile), false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := quic.DialAddr(ctx, srv.Addr().String(), clientTLS, quicconf.QUICConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.CloseWithError(0, "test done") })
	st, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rc := &rawClient{st: st, fr: wire.NewFrameReader(st, 1<<20)}
	rc.send(t, &wire.Auth{Tenant: "default", ClientFlags: wire.SupportedFlags, ClientFeatures: features})
	if m, ok := rc.message(t).(*wire.AuthOK); !ok || m.ServerFeatures != features {
		t.Fatalf("handshake offering %#x answered %+v, want AuthOK granting it all", features, m)
	}
	return rc
}

func (rc *rawClient) send(t *testing.T, m wire.Message) {
	t.Helper()
	b, err := wire.AppendMessage(nil, m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rc.st.Write(b); err != nil {
		t.Fatal(err)
	}
}

func (rc *rawClient) frame(t *testing.T) (wire.Header, []byte) {
	t.Helper()
	_ = rc.st.SetReadDeadline(time.Now().Add(10 * time.Second))
	h, payload, err := rc.fr.Next()
	if err != nil {
		t.Fatalf("read an answer: %v", err)
	}
	return h, payload
}

func (rc *rawClient) message(t *testing.T) wire.Message {
	t.Helper()
	h, payload := rc.frame(t)
	if h.Flags != 0 {
		t.Fatalf("answer has flags %#04x, want a control message", h.Flags)
	}
	m, err := wire.DecodeMessage(payload)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestShardOwnersAnswered(t *testing.T) {
	rc := startOwners(t, wire.FeatureShardOwners)
	rc.send(t, &wire.ShardOwners{RequestID: 5, Tenant: "default", Namespace: "default", Stream: "orders"})
	want := &wire.ShardOwnersView{RequestID: 5, Shards: 2, Routing: "jump", Durable: true, Owners: ownersTopology.Owners}
	if got := rc.message(t); !reflect.DeepEqual(got, want) {
		t.Fatalf("shard_owners answered %+v, want %+v", got, want)
	}
}

// A client that did not negotiate FeatureShardOwners is refused, the way
// every request the connection cannot take is: invalid_request, to its id.
func TestShardOwnersRefusedWithoutFeature(t *testing.T) {
	rc := startOwners(t, wire.SupportedFeatures&^wire.FeatureShardOwners)
	rc.send(t, &wire.ShardOwners{RequestID: 6, Tenant: "default", Namespace: "default", Stream: "orders"})
	got, ok := rc.message(t).(*wire.ErrorMsg)
	if !ok || got.RequestID != 6 || got.Code != wire.CodeInvalidRequest {
		t.Fatalf("shard_owners without the feature answered %+v, want invalid_request to request 6", got)
	}
}

func TestErrorOwnerOnlyWithRedirect(t *testing.T) {
	tests := []struct {
		name      string
		features  uint32
		wantOwner *wire.Owner
	}{
		{name: "negotiated", features: wire.FeatureShardOwners | wire.FeatureRedirect, wantOwner: &movedOwner},
		{name: "not negotiated", features: wire.FeatureShardOwners},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := startOwners(t, tt.features)
			rc.send(t, &wire.ShardOwners{RequestID: 7, Tenant: "default", Namespace: "default", Stream: "moved"})
			got, ok := rc.message(t).(*wire.ErrorMsg)
			if !ok || got.RequestID != 7 || got.Code != wire.CodeNotLeader || got.Retry != wire.RetryRedirect {
				t.Fatalf("answered %+v, want not_leader (redirect) to request 7", got)
			}
			if !reflect.DeepEqual(got.Owner, tt.wantOwner) {
				t.Fatalf("error owner = %+v, want %+v", got.Owner, tt.wantOwner)
			}
		})
	}
}

// The owner flag is one a client that did not offer FeatureRedirect may
// not parse at all: without the feature the ack must not carry it.
func TestAckOwnerOnlyWithRedirect(t *testing.T) {
	tests := []struct {
		name      string
		features  uint32
		wantFlags uint16
		wantOwner *wire.Owner
	}{
		{name: "negotiated", features: wire.FeatureRedirect, wantFlags: wire.FlagPublishAck | wire.FlagPublishAckOwner, wantOwner: &movedOwner},
		{name: "not negotiated", features: wire.SupportedFeatures &^ wire.FeatureRedirect, wantFlags: wire.FlagPublishAck},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := startOwners(t, tt.features)
			pub := wire.AppendPublish(nil, &wire.Publish{
				RequestID: 9, Ack: wire.AckPerBatch, Scope: wire.Scope{Tenant: "default", Namespace: "default", Stream: "orders"},
				Payloads: [][]byte{[]byte("x")},
			})
			if _, err := rc.st.Write(pub); err != nil {
				t.Fatal(err)
			}
			h, payload := rc.frame(t)
			if h.Flags != tt.wantFlags {
				t.Fatalf("ack flags %#04x, want %#04x", h.Flags, tt.wantFlags)
			}
			ack, err := wire.DecodeAck(h.Flags, payload)
			if err != nil {
				t.Fatal(err)
			}
			if ack.RequestID != 9 || ack.Err == nil || ack.Err.Code != wire.CodeNotLeader {
				t.Fatalf("ack = %+v (err %v), want not_leader for request 9", ack, ack.Err)
			}
			if !reflect.DeepEqual(ack.Err.Owner, tt.wantOwner) {
				t.Fatalf("ack owner = %+v, want %+v", ack.Err.Owner, tt.wantOwner)
			}
		})
	}
}
