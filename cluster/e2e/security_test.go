package e2e_test

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/quic-go/quic-go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/clustertest"
	"github.com/getfelix/felix-go/internal/clustercerts"
	"github.com/getfelix/felix-go/peerlink"
)

// The members' own links, tried as an attacker on the network would:
// nothing a stranger sends to a member's actor port crashes it or stops
// one of its actors, and a member's certificate speaks for that member
// only.

// TestActorPortRefusesStrangers: a plaintext gRPC client and one with a
// certificate from another CA get nothing from a member's actor port (no
// process list, no actor.Stop to its registry); one holding a member's
// certificate is refused both too. The member keeps serving: a publish
// to a new stream it owns (which its registry places) succeeds after,
// and the other member still reads its tree over the port.
func TestActorPortRefusesStrangers(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Nodes: 2, LeaseTTL: leaseTTL})
	c.WaitReady(t, 2)
	target, other := c.Members()[0], c.Members()[1]
	addr := actorAddr(t, c, target)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	foreignCA, err := clustercerts.NewCA("foreign CA")
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := foreignCA.Leaf(other.NodeID)
	if err != nil {
		t.Fatal(err)
	}
	memberCert, err := tls.LoadX509KeyPair(c.PeerCerts(other.NodeID).Cert, c.PeerCerts(other.NodeID).Key)
	if err != nil {
		t.Fatal(err)
	}
	callers := []struct {
		name  string
		creds credentials.TransportCredentials
		// list and stop are the status codes the calls get: a TLS
		// handshake the port refuses (Unavailable), or, for a member, a
		// method the port does not serve and a message its guard refuses.
		list, stop codes.Code
	}{
		{"plaintext", insecure.NewCredentials(), codes.Unavailable, codes.Unavailable},
		{"foreign certificate", credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{foreign}, InsecureSkipVerify: true}), codes.Unavailable, codes.Unavailable},
		{"a member's certificate", credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{memberCert}, InsecureSkipVerify: true}), codes.Unimplemented, codes.PermissionDenied},
	}
	for _, cl := range callers {
		rc := remoting(t, addr, cl.creds)
		res, err := rc.ListProcesses(ctx, &remote.ListProcessesRequest{})
		if res != nil || err == nil {
			t.Fatalf("%s: ListProcesses answered %v, %v; want nothing", cl.name, res, err)
		}
		if status.Code(err) != cl.list {
			t.Errorf("%s: ListProcesses: %v, want code %s", cl.name, err, cl.list)
		}
		if err := stopRemotely(ctx, rc, addr, "felix/registry"); status.Code(err) != cl.stop {
			t.Errorf("%s: actor.Stop to felix/registry: %v, want code %s", cl.name, err, cl.stop)
		}
	}
	if !target.Running() {
		t.Fatalf("%s exited after the calls on its actor port", target.NodeID)
	}

	// The Stop, had it been delivered, would be in the registry's system
	// queue before anything the publish below makes it handle.
	cc := dial(t, c, target.Addr)
	s := streamOwnedBy(ctx, t, cc, target.NodeID)
	if err := cc.Publish(ctx, s, []byte("after"), client.PublishOptions{}); err != nil {
		t.Fatalf("publish to %s/%s at %s after the calls: %v", s.Namespace, s.Name, target.NodeID, err)
	}
	for _, tr := range c.Trees(t, other).Members {
		if tr.NodeID == target.NodeID && (tr.Error != "" || !strings.Contains(string(tr.Actors), `"felix/registry"`)) {
			t.Errorf("%s's tree as %s reads it over the actor port: error %q, actors %s; want its registry", target.NodeID, other.NodeID, tr.Error, tr.Actors)
		}
	}
}

// actorAddr waits for m to publish its actor port in its member record.
func actorAddr(t *testing.T, c *clustertest.Cluster, m *clustertest.Member) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, ms := range c.Status(t, m).Members {
			if ms.NodeID == m.NodeID && ms.ActorAddr != "" {
				return ms.ActorAddr
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s published no actor address within 30 s", m.NodeID)
		}
		time.Sleep(100 * time.Millisecond) // another process's etcd write: nothing to await
	}
}

func remoting(t *testing.T, addr string, creds credentials.TransportCredentials) remote.RemotingClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return remote.NewRemotingClient(conn)
}

// stopRemotely sends actor.Stop to the actor named id at addr, as
// protoactor's remote carries it (a connect request, then a batch), and
// returns once the member has read all of it (nil then) or refused it.
func stopRemotely(ctx context.Context, rc remote.RemotingClient, addr, id string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := rc.Receive(ctx)
	if err != nil {
		return err
	}
	stop, err := proto.Marshal(&actor.Stop{})
	if err != nil {
		return err
	}
	msgs := []*remote.RemoteMessage{
		{MessageType: &remote.RemoteMessage_ConnectRequest{ConnectRequest: &remote.ConnectRequest{
			ConnectionType: &remote.ConnectRequest_ServerConnection{ServerConnection: &remote.ServerConnection{SystemId: "intruder", Address: "127.0.0.1:1"}},
		}}},
		{MessageType: &remote.RemoteMessage_MessageBatch{MessageBatch: &remote.MessageBatch{
			TypeNames: []string{"actor.Stop"},
			Targets:   []*actor.PID{actor.NewPID(addr, id)},
			Envelopes: []*remote.MessageEnvelope{{TypeId: 0, MessageData: stop, Target: 0}},
		}}},
	}
	for _, m := range msgs {
		if err := st.Send(m); err != nil {
			break // the answer's status says why
		}
	}
	_ = st.CloseSend()
	for {
		if _, err := st.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// streamOwnedBy finds a stream (shard 0) that node owns, placing new ones
// until one lands there.
func streamOwnedBy(ctx context.Context, t *testing.T, cc *client.ClusterClient, node string) client.Stream {
	t.Helper()
	for i := range 64 {
		s := client.Stream{Namespace: "sec", Name: fmt.Sprintf("owned-%02d", i)}
		for {
			top, err := cc.ShardOwners(ctx, s)
			if err != nil {
				t.Fatalf("shard_owners %s: %v", s.Name, err)
			}
			if top.Owners[0].Available {
				if top.Owners[0].Owner.NodeID == node {
					return s
				}
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("stream %s never placed", s.Name)
			}
		}
	}
	t.Fatalf("none of 64 streams placed on %s", node)
	return client.Stream{}
}

// TestPeerLinkRefusesAnotherMembersCertificate: a caller holding node-2's
// certificate (the cluster CA signed it) that says hello to node-1's peer
// link as node-3 is disconnected with the identity code, and the message
// it sent after the hello is never received.
func TestPeerLinkRefusesAnotherMembersCertificate(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Nodes: 2, LeaseTTL: leaseTTL})
	c.WaitReady(t, 2)
	target, holder := c.Members()[0], c.Members()[1]
	var peerAddr string
	for _, ms := range c.Status(t, target).Members {
		if ms.NodeID == target.NodeID {
			peerAddr = ms.PeerAddr
		}
	}
	if peerAddr == "" {
		t.Fatalf("%s advertises no peer link", target.NodeID)
	}
	cert, err := tls.LoadX509KeyPair(c.PeerCerts(holder.NodeID).Cert, c.PeerCerts(holder.NodeID).Key)
	if err != nil {
		t.Fatal(err)
	}
	received := c.Metric(t, target, "felix_peer_messages_received_total")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := quic.DialAddr(ctx, peerAddr, &tls.Config{
		Certificates: []tls.Certificate{cert}, NextProtos: []string{peerlink.ALPN},
		MinVersion: tls.VersionTLS13, InsecureSkipVerify: true,
	}, &quic.Config{MaxIdleTimeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("dial %s's peer link with %s's certificate: %v", target.NodeID, holder.NodeID, err)
	}
	defer conn.CloseWithError(0, "")
	st, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The link's frames (peerlink/frame.go): u32 length, kind, body; a
	// hello (1) names the sender, a message (2) is u16 group length,
	// group, data.
	frames := binary.BigEndian.AppendUint32(nil, uint32(1+len("node-3")))
	frames = append(append(frames, 1), "node-3"...)
	frames = binary.BigEndian.AppendUint32(frames, uint32(1+2+len("g")+len("forged")))
	frames = binary.BigEndian.AppendUint16(append(frames, 2), uint16(len("g")))
	frames = append(append(frames, "g"...), "forged"...)
	if _, err := st.Write(frames); err != nil {
		t.Fatal(err)
	}
	select {
	case <-conn.Context().Done():
	case <-ctx.Done():
		t.Fatalf("%s kept the connection of %s's certificate saying it is node-3", target.NodeID, holder.NodeID)
	}
	var appErr *quic.ApplicationError
	if err := context.Cause(conn.Context()); !errors.As(err, &appErr) || !appErr.Remote || appErr.ErrorCode != 2 {
		t.Errorf("the connection ended with %v, want %s's identity refusal (application error 2)", err, target.NodeID)
	}
	if got := c.Metric(t, target, "felix_peer_messages_received_total"); got != received {
		t.Errorf("%s received %v peer messages, %v before: the forged one was taken", target.NodeID, got, received)
	}
}

// TestStoppedRegistryStopsTheMember: the registry of the member leading a
// replicated shard is stopped (chaos; a stop from outside, or a crash loop
// past its restart limit, is the same). The member cannot serve without
// it, so it stops (felix broker exits non-zero) and leaves the cluster:
// the shard elects a leader among the others and takes publishes there,
// and what was acknowledged before is still there.
func TestStoppedRegistryStopsTheMember(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Nodes: 3, LeaseTTL: leaseTTL, ExtraArgs: []string{"--chaos"}})
	c.WaitReady(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cc := dialAll(t, c)
	createReplicated(ctx, t, cc)
	if err := cc.Publish(ctx, replicatedStream, []byte("before"), client.PublishOptions{}); err != nil {
		t.Fatalf("publish before: %v", err)
	}
	leader := leaderOf(ctx, t, c)

	c.ChaosKill(t, leader, "felix/registry", "stop")
	// The member's exit is the event: its process is reaped when it ends.
	exitCtx, cancelExit := context.WithTimeout(ctx, 20*time.Second)
	defer cancelExit()
	exited, err := leader.WaitExit(exitCtx)
	switch {
	case !exited:
		t.Fatalf("%s still runs after losing its registry: %v", leader.NodeID, err)
	case err == nil:
		t.Errorf("%s exited with status 0 after losing its registry, want non-zero", leader.NodeID)
	}
	// Failover: a publish succeeds at a new leader within the lease TTL
	// and an election; the client follows not_leader and silent owners.
	start := time.Now()
	for {
		err := cc.Publish(ctx, replicatedStream, []byte("after"), client.PublishOptions{})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no publish succeeded within %s after %s stopped: %v", time.Since(start), leader.NodeID, err)
		}
		time.Sleep(50 * time.Millisecond) // a retry against a moving leader: nothing to await from here
	}
	if next := leaderOf(ctx, t, c); next == leader {
		t.Fatalf("%s still leads after it stopped", leader.NodeID)
	}
	t.Logf("a publish succeeded %s after %s stopped", time.Since(start).Round(time.Millisecond), leader.NodeID)
}
