package replication

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/getfelix/felix-go/internal/testcerts"
	"github.com/getfelix/felix-go/peerlink"
	"github.com/getfelix/felix-go/persistence"
)

// The pieces together, as a shard's replicas will run them: each replica
// on its own persistence.Log and raft.state, raft messages over peerlink
// (QUIC, mutual TLS) on loopback, one goroutine per replica owning its
// Replica (as the shard actor will). The in-memory cluster tests cover the
// protocol's corner cases deterministically; this one checks that the real
// log, the real link and real timers carry them.

// netReplica is one replica with its disk and link.
type netReplica struct {
	id      uint64
	dir     string
	addr    string
	link    *peerlink.Link
	log     *persistence.Log
	inbox   chan raftpb.Message
	propose chan proposal
	stop    context.CancelFunc
	done    chan struct{}

	mu      sync.Mutex
	applied []Committed // every entry applied since the replica started
	status  Status
}

type proposal struct {
	records [][]byte
	err     chan error
}

type netCluster struct {
	t     *testing.T
	ca    *testcerts.CA
	nodes map[uint64]*netReplica

	mu    sync.Mutex
	addrs map[uint64]string // each replica's link address, the same across restarts
	// moved is signalled whenever a replica's status or applied entries
	// changed, for the test's waits.
	moved chan struct{}
}

// wait blocks until some replica moved, or d passed.
func (c *netCluster) wait(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.moved:
	case <-t.C:
	}
}

func (c *netCluster) signal() {
	select {
	case c.moved <- struct{}{}:
	default:
	}
}

func (c *netCluster) addr(id uint64) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.addrs[id]
}

const netTick = 20 * time.Millisecond // election after 200–400 ms

func newNetCluster(t *testing.T, n int) *netCluster {
	c := &netCluster{t: t, nodes: map[uint64]*netReplica{}, addrs: map[uint64]string{}, moved: make(chan struct{}, 1)}
	c.ca = testcerts.NewCA(t)
	var peers []raft.Peer
	for id := uint64(1); id <= uint64(n); id++ {
		peers = append(peers, raft.Peer{ID: id})
	}
	for id := uint64(1); id <= uint64(n); id++ {
		c.nodes[id] = &netReplica{id: id, dir: t.TempDir(), addr: "127.0.0.1:0"}
	}
	for id := uint64(1); id <= uint64(n); id++ {
		c.start(id, peers)
	}
	t.Cleanup(func() {
		for id, r := range c.nodes {
			if r.stop != nil {
				c.kill(id)
			}
		}
	})
	return c
}

// start opens the replica's log and raft.state and runs it; peers only on
// the first start.
func (c *netCluster) start(id uint64, peers []raft.Peer) {
	t := c.t
	r := c.nodes[id]
	l, err := persistence.Open(filepath.Join(r.dir, "log"), persistence.Config{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := OpenStorage(l, filepath.Join(r.dir, "raft"))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := NewReplica(Config{ID: id, Storage: st, Peers: peers})
	if err != nil {
		t.Fatal(err)
	}
	r.log, r.inbox, r.propose, r.done = l, make(chan raftpb.Message, 1024), make(chan proposal), make(chan struct{})
	r.applied = nil
	r.link, err = peerlink.Listen(r.addr, peerlink.Config{
		NodeID: fmt.Sprint(id), Cert: c.ca.Leaf(t, fmt.Sprint(id)), CAs: c.ca.Pool,
		Handle: func(_ string, m peerlink.Message) {
			var msg raftpb.Message
			if msg.Unmarshal(m.Data) != nil {
				return
			}
			select {
			case r.inbox <- msg:
			default: // full: raft sends again what matters
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	r.addr = r.link.Addr().String() // a restart listens on the same address
	c.mu.Lock()
	c.addrs[id] = r.addr
	c.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	go c.run(ctx, r, rep)
}

// run is the replica's owner: ticks, messages and proposals, each followed
// by its Ready.
func (c *netCluster) run(ctx context.Context, r *netReplica, rep *Replica) {
	defer close(r.done)
	tick := time.NewTicker(netTick)
	defer tick.Stop()
	send := func(msgs []raftpb.Message) {
		for _, m := range msgs {
			data, err := m.Marshal()
			if err == nil {
				r.link.Send(fmt.Sprint(m.To), c.addr(m.To), peerlink.Message{Group: "t/ns/s/0", Data: data})
			}
		}
	}
	apply := func(e Committed) {
		r.mu.Lock()
		r.applied = append(r.applied, e)
		r.mu.Unlock()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			rep.Tick()
		case m := <-r.inbox:
			_ = rep.Step(m)
		case p := <-r.propose:
			p.err <- rep.Propose(p.records, nil)
		}
		for rep.HasReady() {
			if err := rep.Ready(send, apply); err != nil {
				c.t.Errorf("replica %d: Ready: %v", r.id, err)
				return
			}
		}
		st := rep.Status()
		r.mu.Lock()
		r.status = st
		r.mu.Unlock()
		c.signal()
	}
}

// kill stops a replica as a crash would, keeping its disk.
func (c *netCluster) kill(id uint64) {
	r := c.nodes[id]
	r.stop()
	<-r.done
	r.stop = nil
	_ = r.link.Close()
	_ = r.log.Close()
}

// leader waits for a replica that says it leads.
func (c *netCluster) leader(ctx context.Context) uint64 {
	for ctx.Err() == nil {
		for id, r := range c.nodes {
			if r.stop == nil {
				continue
			}
			r.mu.Lock()
			st := r.status
			r.mu.Unlock()
			if st.State == raft.StateLeader {
				return id
			}
		}
		c.wait(netTick)
	}
	c.t.Fatal("no leader elected")
	return 0
}

// publish proposes one record through whichever replica leads until the
// leader has applied it: a proposal taken by a leader that then lost its
// leadership may never commit, and is proposed again.
func (c *netCluster) publish(ctx context.Context, rec string) {
	for ctx.Err() == nil {
		id := c.leader(ctx)
		r := c.nodes[id]
		p := proposal{records: [][]byte{[]byte(rec)}, err: make(chan error, 1)}
		select {
		case r.propose <- p:
		case <-r.done:
			continue
		}
		err := <-p.err
		var nl *ErrNotLeader
		if err != nil && !errors.As(err, &nl) && !errors.Is(err, raft.ErrProposalDropped) {
			c.t.Fatalf("propose: %v", err)
		}
		if err == nil && c.waitApplied(ctx, r, rec, 2*time.Second) {
			return
		}
	}
	c.t.Fatal(ctx.Err())
}

// waitApplied waits up to d for replica r to apply rec.
func (c *netCluster) waitApplied(ctx context.Context, r *netReplica, rec string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		r.mu.Lock()
		n := len(r.applied)
		found := n > 0 && len(r.applied[n-1].Records) == 1 && string(r.applied[n-1].Records[0]) == rec
		for i := n - 1; i >= 0 && i >= n-8 && !found; i-- {
			found = len(r.applied[i].Records) == 1 && string(r.applied[i].Records[0]) == rec
		}
		r.mu.Unlock()
		if found {
			return true
		}
		c.wait(netTick)
	}
	return false
}

// records is what a replica applied, as (index, base, record) lines.
func (r *netReplica) records() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.applied {
		for i, rec := range e.Records {
			out = append(out, fmt.Sprintf("%d@%d:%s", e.Index, e.Base+uint64(i), rec))
		}
	}
	return out
}

func TestReplicasOverTheLinkAndTheLog(t *testing.T) {
	c := newNetCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 100 {
		c.publish(ctx, fmt.Sprint("a", i))
	}
	// The leader dies; the others go on.
	dead := c.leader(ctx)
	c.kill(dead)
	for i := range 100 {
		c.publish(ctx, fmt.Sprint("b", i))
	}
	// It comes back from its disk alone and catches up.
	c.start(dead, nil)
	for i := range 20 {
		c.publish(ctx, fmt.Sprint("c", i))
	}
	// Every replica ends with the same records at the same offsets, and
	// their logs hold the same entries.
	var want []string
	for ctx.Err() == nil {
		want = c.nodes[c.leader(ctx)].records()
		same := len(want) >= 220
		for _, r := range c.nodes {
			if got := r.records(); !reflect.DeepEqual(got[max(0, len(got)-len(want)):], want) || len(got) < len(want) {
				same = false
			}
		}
		if same {
			break
		}
		c.wait(netTick)
	}
	if ctx.Err() != nil {
		for id, r := range c.nodes {
			t.Logf("replica %d applied %d records", id, len(r.records()))
		}
		t.Fatal("replicas did not converge")
	}
	var logs [][]string
	for _, id := range []uint64{1, 2, 3} {
		var entries []string
		err := c.nodes[id].log.EntryHeaders(c.nodes[id].log.StartOffset(), func(e Entry) bool {
			entries = append(entries, fmt.Sprintf("%d/%d@%d", e.Index, e.Term, e.Base))
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
		logs = append(logs, entries)
	}
	n := min(len(logs[0]), len(logs[1]), len(logs[2]))
	for i := range logs {
		if !reflect.DeepEqual(logs[i][:n], logs[0][:n]) {
			t.Fatalf("replica %d's log differs from replica 1's", i+1)
		}
	}
}
