package member

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/getfelix/felix-go/metrics"
	"github.com/getfelix/felix-go/peerlink"
)

// A cluster member with cluster_tls_* set runs a peer link (package
// peerlink): QUIC with mutual TLS against the cluster's CA, one bounded
// queue per peer. Replicated shards send their raft messages over it,
// each tagged with the shard's group; Peers routes what arrives to the
// handler registered for the group. Without the certificates there is no
// link and Member.Peers is nil: nothing can replicate, and the broker says
// so once at start.

// ErrGroupRegistered is returned by Peers.Register for a group that has a
// live handler: two shards claiming one group would each see half the
// other's traffic.
var ErrGroupRegistered = errors.New("member: peer group already has a handler")

// Peers is the member's peer link and the handlers of its groups. Its
// methods are safe for concurrent use, and none blocks on the network.
type Peers struct {
	link *peerlink.Link
	// resolve finds a member's peer address (the cluster node's mirror).
	resolve func(node string) (string, bool)
	// addr is the advertised peer address, the one in the member record.
	addr string

	mu     sync.RWMutex
	groups map[string]*peerHandler

	received, unknown atomic.Uint64
	// unresolved counts, by node, sends to a node with no known peer
	// address (not live, or without a peer link); the link never saw them.
	unresolvedMu sync.Mutex
	unresolved   map[string]uint64

	// base is the monotonic clock's origin for heard, each member's last
	// arrival (*atomic.Int64 of nanoseconds since base, by node id;
	// liveness.go). stopBeats ends the beat loop, which closes beatsDone.
	base      time.Time
	heard     sync.Map
	stopBeats chan struct{}
	beatsDone chan struct{}

	closeOnce sync.Once
	closeErr  error
}

// peerHandler is one registration; its identity lets a stale unregister
// leave a newer registration of the group alone.
type peerHandler struct {
	h func(from string, data []byte)
}

// Peers is the member's peer link, nil until StartPeers started it, and
// when the broker was started without cluster_tls_ca, cluster_tls_cert and
// cluster_tls_key.
func (m *Member) Peers() *Peers { return m.peers.Load() }

// Addr is the peer address other members dial, as the member record has it.
func (p *Peers) Addr() string { return p.addr }

// Register routes the group's messages to h, called on the peer
// connection's reader goroutine with the sending member's node id: h must
// not block (post to an actor's mailbox, dropping when it is full; raft
// sends again). A group with a live handler is refused with
// ErrGroupRegistered. unregister removes this registration; calling it
// again does nothing.
func (p *Peers) Register(group string, h func(from string, data []byte)) (unregister func(), err error) {
	if err := peerlink.CheckMessage(peerlink.Message{Group: group}); err != nil {
		return nil, fmt.Errorf("member: peer group %q: %w", group, err)
	}
	if h == nil {
		return nil, errors.New("member: peer group handler is nil")
	}
	reg := &peerHandler{h: h}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.groups[group]; ok {
		return nil, fmt.Errorf("%w: %s", ErrGroupRegistered, group)
	}
	p.groups[group] = reg
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.groups[group] == reg {
			delete(p.groups, group)
		}
	}, nil
}

// Send queues data for the group on member toNode and reports whether it
// was queued. It is false when toNode has no known peer address, when its
// queue is full, and after Close; raft sends again what it needs.
func (p *Peers) Send(toNode, group string, data []byte) bool {
	addr, ok := p.resolve(toNode)
	if !ok {
		p.unresolvedMu.Lock()
		p.unresolved[toNode]++
		p.unresolvedMu.Unlock()
		return false
	}
	return p.link.Send(toNode, addr, peerlink.Message{Group: group, Data: data})
}

// handle is the link's Handle: it finds the group's handler under the read
// lock and calls it outside it, so a handler may unregister itself.
func (p *Peers) handle(from string, m peerlink.Message) {
	p.noteHeard(from)
	if m.Group == peerBeatGroup {
		return // counted by no metric: every member sends ten a second
	}
	p.received.Add(1)
	p.mu.RLock()
	reg := p.groups[m.Group]
	p.mu.RUnlock()
	if reg == nil {
		// A shard not (yet, or any more) here: its group's peers retry.
		p.unknown.Add(1)
		return
	}
	reg.h(from, m.Data)
}

// Close stops the link: its listener, connections and queues. Sends after
// it return false. Calling it again returns the first call's error.
func (p *Peers) Close() error {
	p.closeOnce.Do(func() {
		close(p.stopBeats)
		<-p.beatsDone
		p.closeErr = p.link.Close()
	})
	return p.closeErr
}

// totals is what the felix_peer_* metrics read at scrape time.
func (p *Peers) totals() metrics.PeerTotals {
	stats := p.link.Stats()
	byPeer := make(map[string]metrics.PeerSample, len(stats))
	for id, s := range stats {
		byPeer[id] = metrics.PeerSample{Peer: id, Queued: s.Queued, Sent: s.Sent, Dropped: s.Dropped, Connected: s.Connected}
	}
	p.unresolvedMu.Lock()
	for id, n := range p.unresolved {
		s := byPeer[id]
		s.Peer, s.Dropped = id, s.Dropped+n
		byPeer[id] = s
	}
	p.unresolvedMu.Unlock()
	t := metrics.PeerTotals{Received: p.received.Load(), Unknown: p.unknown.Load()}
	for _, s := range byPeer {
		t.Peers = append(t.Peers, s)
	}
	slices.SortFunc(t.Peers, func(a, b metrics.PeerSample) int { return strings.Compare(a.Peer, b.Peer) })
	return t
}

// PeerConfig is the peer link's listener.
type PeerConfig struct {
	// NodeID is this member's node id, which its certificate names.
	NodeID string
	// Cert is the member's certificate; CAs the cluster's CA, which every
	// peer's certificate must chain to.
	Cert tls.Certificate
	CAs  *x509.CertPool
	// Listen is the UDP address the link listens on.
	Listen string
	// Advertise is the address other members dial, in the member record;
	// "" advertises the bound address.
	Advertise string
}

// StartPeers starts the peer link and the snapshot service on it, once,
// before the member's cluster node joins, and returns the address its
// member record advertises.
func (m *Member) StartPeers(cfg PeerConfig) (string, error) {
	p := &Peers{groups: map[string]*peerHandler{}, unresolved: map[string]uint64{}, resolve: m.peerAddr,
		base: time.Now(), stopBeats: make(chan struct{}), beatsDone: make(chan struct{})}
	link, err := peerlink.Listen(cfg.Listen, peerlink.Config{
		NodeID: cfg.NodeID, Cert: cfg.Cert, CAs: cfg.CAs, Handle: p.handle,
		Log: m.log.With().Str("component", "peerlink").Logger(),
	})
	if err != nil {
		return "", fmt.Errorf("%w (set cluster_peer_listen to a free UDP address)", err)
	}
	p.link = link
	m.snaps = newSnapshots(m)
	if err := m.snaps.register(p); err != nil {
		return "", errors.Join(err, link.Close())
	}
	p.addr = cfg.Advertise
	if p.addr == "" {
		p.addr = link.Addr().String()
		if ua, ok := link.Addr().(*net.UDPAddr); ok && ua.IP.IsUnspecified() {
			m.log.Warn().Str("peer_addr", p.addr).Msg("the peer link listens on every interface and advertises that address, which other members cannot dial: set cluster_peer_advertise")
		}
	}
	go p.runBeats(m.peerMembers, m.memberGone, p.stopBeats, p.beatsDone)
	m.peers.Store(p)
	m.metrics.WatchPeers(p.totals)
	m.log.Info().Str("peer_listen", link.Addr().String()).Str("peer_advertise", p.addr).Msg("peer link listening")
	return p.addr, nil
}

// peerAddr resolves a member's peer address through the cluster node.
func (m *Member) peerAddr(nodeID string) (string, bool) {
	node := m.host.Node()
	if node == nil {
		return "", false
	}
	return node.PeerAddr(nodeID)
}

// peerMembers lists the live members with a peer link, this one aside.
func (m *Member) peerMembers() []string {
	if node := m.host.Node(); node != nil {
		return node.PeerMembers()
	}
	return nil
}

// ClosePeers stops the peer link, after the shards that sent over it.
func (m *Member) ClosePeers() error {
	if p := m.peers.Load(); p != nil {
		return p.Close()
	}
	return nil
}
