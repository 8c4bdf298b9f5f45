package client_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/config"
	"github.com/getfelix/felix-go/wire"
)

// udpProxy forwards QUIC datagrams between clients and one broker. Muted,
// it drops what the broker sends: to the clients the broker is then as
// silent as a SIGKILLed one, while what they send still reaches it (so a
// publish in flight may be written, its answer lost).
type udpProxy struct {
	pc    net.PacketConn
	to    string
	muted atomic.Bool
	wg    sync.WaitGroup

	mu struct {
		sync.Mutex
		up map[string]net.Conn // the broker side, by client address
	}
}

func startProxy(t *testing.T, to string) *udpProxy {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &udpProxy{pc: pc, to: to}
	p.mu.up = make(map[string]net.Conn)
	p.wg.Go(p.serve)
	t.Cleanup(p.close)
	return p
}

func (p *udpProxy) addr() string { return p.pc.LocalAddr().String() }

// serve forwards what clients send, opening a socket to the broker for
// each new client address.
func (p *udpProxy) serve() {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := p.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		p.mu.Lock()
		up := p.mu.up[from.String()]
		if up == nil {
			if up, err = net.Dial("udp", p.to); err != nil {
				p.mu.Unlock()
				return
			}
			p.mu.up[from.String()] = up
			p.wg.Go(func() { p.back(up, from) })
		}
		p.mu.Unlock()
		_, _ = up.Write(buf[:n])
	}
}

// back forwards what the broker sends to client, unless muted.
func (p *udpProxy) back(up net.Conn, client net.Addr) {
	buf := make([]byte, 64<<10)
	for {
		n, err := up.Read(buf)
		if err != nil {
			return
		}
		if !p.muted.Load() {
			_, _ = p.pc.WriteTo(buf[:n], client)
		}
	}
}

func (p *udpProxy) close() {
	_ = p.pc.Close()
	p.mu.Lock()
	for _, up := range p.mu.up {
		_ = up.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// silentOwnerSetup is one broker reached at two addresses, each through a
// proxy: owner, where the ClusterClient's calls are routed until it is
// muted, and other, which names itself the owner of every shard (a single
// broker names the address it was asked at), as a member that took the
// shard over does.
type silentOwnerSetup struct {
	b            *broker.Broker
	cfg          config.Config
	cc           *client.ClusterClient
	owner, other *udpProxy
	st           client.Stream
	// arrived is set when a call reached owner after it was muted: from
	// then on other takes calls instead of redirecting them to owner.
	arrived atomic.Bool
	// answers are what the ClusterClient's watches heard.
	answers chan watchAnswer
}

type watchAnswer struct {
	from, other string
	owner       bool
	err         error
}

// idleTimeout and dialTimeout are the ClusterClient's in these tests: the
// calls must return long before either (a topology lookup waits up to
// dialTimeout for a member's answer).
const (
	idleTimeout = 20 * time.Second
	dialTimeout = 10 * time.Second
)

// newSilentOwner starts the setup, with a context that ends with t.
func newSilentOwner(t *testing.T) (*silentOwnerSetup, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	cfg := brokertest.Config(t)
	s := &silentOwnerSetup{b: brokertest.Start(t, cfg), cfg: cfg, st: client.Stream{Name: "hedged"}, answers: make(chan watchAnswer, 4096)}
	if _, err := brokertest.Dial(t, s.b, cfg).CreateStream(ctx, s.st, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}
	s.owner, s.other = startProxy(t, s.b.Addr().String()), startProxy(t, s.b.Addr().String())
	if s.other.addr() < s.owner.addr() {
		// The ClusterClient asks the members it is connected to in
		// address order: the owner first.
		s.owner, s.other = s.other, s.owner
	}
	o := clusterOptions(t, cfg)
	o.IdleTimeout, o.KeepAlive, o.DialTimeout = idleTimeout, 5*time.Second, dialTimeout
	s.cc = dialCluster(t, []string{s.owner.addr(), s.other.addr()}, o)
	// Runs before the ClusterClient closes: a client closing waits, up to
	// its ctx, for a muted broker to finish its publish streams.
	t.Cleanup(func() { s.owner.muted.Store(false) })
	client.SetRouteHook(s.cc, func(addr string) error {
		switch {
		case addr == s.other.addr() && !s.arrived.Load():
			return &wire.Error{Code: wire.CodeNotLeader, Retry: wire.RetryRedirect, Message: "moved",
				Owner: &wire.Owner{NodeID: "owner", Addr: s.owner.addr()}}
		case addr == s.owner.addr() && s.owner.muted.Load():
			s.arrived.Store(true)
		}
		return nil
	})
	client.SetWatchHook(s.cc, func(from string, owner bool, err error, other string) {
		select {
		case s.answers <- watchAnswer{from: from, other: other, owner: owner, err: err}:
		default:
		}
	})
	return s, ctx
}

// publish publishes payload through the ClusterClient.
func (s *silentOwnerSetup) publish(t *testing.T, ctx context.Context, payload string) {
	t.Helper()
	if err := s.cc.Publish(ctx, s.st, []byte(payload), client.PublishOptions{}); err != nil {
		t.Fatalf("publish %s: %v", payload, err)
	}
}

// TestClusterClientLeavesSilentOwnerOfAPublish and the tests after it: a
// call its owner stops answering (the owner silent as a SIGKILLed broker
// is: what it sends never arrives) is not left waiting for the connection's idle timeout when
// another member names another owner: the connection is abandoned and
// the call fails as a lost connection (a plain publish, not sent again)
// or is sent again there (an idempotent producer's batch, written once).
func TestClusterClientLeavesSilentOwnerOfAPublish(t *testing.T) {
	s, ctx := newSilentOwner(t)
	s.publish(t, ctx, "before")
	s.owner.muted.Store(true)
	start := time.Now()
	err := s.cc.Publish(ctx, s.st, []byte("unanswered"), client.PublishOptions{})
	var lost *client.ConnectionLostError
	if !errors.As(err, &lost) || !strings.Contains(err.Error(), "abandoned") {
		t.Fatalf("publish to the silent owner: %v, want a ConnectionLostError saying the connection was abandoned", err)
	}
	if took := time.Since(start); took >= idleTimeout/2 {
		t.Fatalf("the publish returned after %s; the idle timeout is %s", took, idleTimeout)
	}
	if !s.arrived.Load() {
		t.Fatal("the publish never reached the muted owner")
	}
	s.publish(t, ctx, "after")
	// The unanswered publish reached the broker: written once, not sent
	// again by the ClusterClient.
	expectLog(t, ctx, s, "before", "unanswered", "after")
}

func TestClusterClientLeavesSilentOwnerOfAnIdempotentBatch(t *testing.T) {
	s, ctx := newSilentOwner(t)
	p, err := s.cc.NewIdempotentProducer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	if _, err := p.Publish(ctx, s.st, [][]byte{[]byte("a")}, nil); err != nil {
		t.Fatal(err)
	}
	s.owner.muted.Store(true)
	start := time.Now()
	res, err := p.Publish(ctx, s.st, [][]byte{[]byte("b")}, nil)
	if err != nil {
		t.Fatalf("idempotent publish past the silent owner: %v", err)
	}
	// Well under the idle timeout and the producer's AckTimeout (10 s).
	if took := time.Since(start); took >= 5*time.Second {
		t.Fatalf("the batch was acknowledged after %s", took)
	}
	if res.Offset != 1 {
		t.Fatalf("batch b acknowledged at offset %d, want 1 (its first write, answered as a duplicate)", res.Offset)
	}
	expectLog(t, ctx, s, "a", "b")
}

func TestClusterClientLookupDoesNotWaitForSilentOwner(t *testing.T) {
	s, ctx := newSilentOwner(t)
	s.publish(t, ctx, "before") // connects the owner: asked first
	s.owner.muted.Store(true)
	start := time.Now()
	top, err := s.cc.ShardOwners(ctx, s.st)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := top.Owner(0); !ok || !o.Available {
		t.Fatalf("shard 0's owner: %+v, %v", o, ok)
	}
	if took := time.Since(start); took >= dialTimeout/2 {
		t.Fatalf("the lookup took %s; the silent owner was asked first and the dial timeout is %s", took, dialTimeout)
	}
}

func TestClusterClientKeepsAnOwnerThatAnswers(t *testing.T) {
	s, ctx := newSilentOwner(t)
	s.publish(t, ctx, "before")
	release := make(chan struct{})
	routed := make(chan error, 1)
	go func() {
		routed <- client.Route(ctx, s.cc, s.st, func(*client.Client) error {
			<-release // an answer that takes long, from an owner alive
			return nil
		})
	}()
	// Several rounds in which the owner answered and the other member
	// named itself: the owner must not be abandoned.
	var fromOwner, naming int
	for fromOwner < 3 || naming < 3 {
		select {
		case a := <-s.answers:
			switch {
			case a.owner && a.err == nil:
				fromOwner++
			case !a.owner && a.other == s.other.addr():
				naming++
			}
		case <-ctx.Done():
			t.Fatalf("the watch heard %d answers from the owner and %d naming another; want 3 of each", fromOwner, naming)
		}
	}
	dials := client.Dials(s.cc)
	close(release)
	if err := <-routed; err != nil {
		t.Fatal(err)
	}
	s.publish(t, ctx, "after")
	if d := client.Dials(s.cc) - dials; d != 0 {
		t.Fatalf("%d dials after the slow call: the owner's connection was given up", d)
	}
	expectLog(t, ctx, s, "before", "after")
}

// expectLog checks the stream's log at the broker holds want, in order.
func expectLog(t *testing.T, ctx context.Context, s *silentOwnerSetup, want ...string) {
	t.Helper()
	page, err := brokertest.Dial(t, s.b, s.cfg).Read(ctx, s.st, 0, client.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range page.Records {
		got = append(got, string(r.Payload))
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("the log holds %q, want %q", got, want)
	}
}
