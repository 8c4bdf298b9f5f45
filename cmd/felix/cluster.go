package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/getfelix/felix-go/cluster"
)

const (
	// clusterTimeout is the cluster command's --timeout: a drain waits
	// for shards to move, which takes longer than one admin request.
	clusterTimeout = time.Minute
	// drainPoll is how often drain asks how many shards are left.
	drainPoll = 500 * time.Millisecond
)

type clusterOpts struct {
	admin  adminOpts
	json   bool
	shards bool
	wait   bool
	certs  certsOpts
	out    io.Writer // os.Stdout; progress goes to os.Stderr
}

func newClusterCmd() *command {
	o := &clusterOpts{out: os.Stdout}
	fs := newFlagSet("cluster")
	o.admin.register(fs)
	// One bound for the whole command: for drain, the request and the
	// wait for its shards to move.
	timeout := fs.Lookup("timeout")
	timeout.Usage = "give up after this long (drain: including the wait for its shards to move)"
	timeout.DefValue = clusterTimeout.String()
	o.admin.timeout = clusterTimeout
	fs.BoolVar(&o.json, "json", false, "ls: print the cluster status as JSON (members and shards)")
	fs.BoolVar(&o.shards, "shards", false, "ls: also list every shard with the member that owns it (a replicated shard's leader)")
	fs.BoolVar(&o.wait, "wait", true, "drain: wait until the node's in-memory shards have moved, printing what is left; move-replica: until the replica moved")
	o.certs.register(fs)
	c := &command{
		name:  "cluster",
		args:  "ls | drain NODE | move-replica STREAM SHARD FROM TO | certs --dir D --nodes A,B,C [--etcd-hosts H]",
		short: "list a cluster's members, drain one, move a replica, or make the peer link's certificates",
		long: `Asks a cluster member's admin endpoint (--admin) about the cluster.

  felix cluster ls [--shards] [--json]
      every member as the member at --admin sees it: its felix/1 and admin
      addresses, whether it is up, draining or down (a member that member
      saw leave or be lost, with when it was last seen; it remembers them
      until it restarts), the shards it owns (and how many of them are
      durable), what is left of its lease, when it joined, and whether the
      actor system lists it too. --shards adds every shard with its owner
      (a replicated shard's leader), a durable shard's home and a
      replicated one's replicas.
  felix cluster drain NODE [--wait=false]
      has NODE hand its in-memory shards to the other members, then waits
      until none is left on it. The replicated shards it leads hand their
      leadership to another replica; replicas and unreplicated durable
      shards stay (move replicas with move-replica).
  felix cluster move-replica TENANT/NAMESPACE/STREAM SHARD FROM TO [--wait=false]
      moves a replicated shard's replica from member FROM to member TO: TO
      joins the shard's raft group as a learner, catches up from the
      leader, becomes a voter, and FROM leaves (if it led, it hands the
      leadership to TO first) and deletes its copy. Publishing goes on
      throughout. Waits until the move is done.

They need a token granting node.view (drain and move-replica: node.manage),
as felix tree does.

  felix cluster certs --dir D --nodes A,B,C [--etcd-hosts H1,H2]
      writes a cluster CA (D/ca.pem, D/ca-key.pem) and a certificate and key
      for each member (D/A.pem, D/A-key.pem, ...) for the peer link members
      replicate over, and prints the knobs each member sets. Files already
      there are kept: run it again with more nodes to add members. Needs no
      broker. --etcd-hosts H1,H2 also writes etcd's server certificate
      (D/etcd.pem, D/etcd-key.pem) for those names and addresses, and each
      member's certificate then doubles as its etcd client certificate.

Examples:
  felix cluster ls --admin 127.0.0.1:7101
  felix cluster drain node-2 --admin 127.0.0.1:7101
  felix cluster move-replica default/default/orders 0 node-2 node-4 --admin 127.0.0.1:7101
  felix cluster certs --dir /etc/felix/cluster --nodes node-1,node-2,node-3 --etcd-hosts etcd1.example,10.0.0.5`,
		flags: fs,
	}
	c.run = o.admin.withContext(fs, func(ctx context.Context, args []string) error { return o.run(ctx, fs.Changed, args) })
	return c
}

func (o *clusterOpts) run(ctx context.Context, changed func(string) bool, args []string) error {
	if len(args) == 0 {
		return usagef("cluster needs ls, drain NODE or certs")
	}
	if args[0] == "certs" {
		return o.certs.run(o.out, changed, args[1:])
	}
	if changed("dir") || changed("nodes") || changed("etcd-hosts") {
		return usagef("--dir, --nodes and --etcd-hosts are certs'")
	}
	switch sub := args[0]; {
	case sub == "ls" && len(args) == 1:
		if changed("wait") {
			return usagef("--wait is drain's; ls does not wait")
		}
		return o.ls(ctx)
	case sub == "ls":
		return usagef("ls takes no arguments, got %q", args[1:])
	case sub == "drain" && len(args) == 2:
		if o.json {
			return usagef("--json is ls's; drain prints its progress as lines")
		}
		return o.drain(ctx, args[1])
	case sub == "drain":
		return usagef("drain needs exactly one NODE (see felix cluster ls), got %q", args[1:])
	case sub == "move-replica":
		if o.json {
			return usagef("--json is ls's; move-replica prints its progress as lines")
		}
		return o.moveReplica(ctx, args[1:])
	default:
		return usagef("cluster needs ls, drain NODE, move-replica or certs, got %q", sub)
	}
}

func (o *clusterOpts) status(ctx context.Context) (cluster.Status, error) {
	var st cluster.Status
	err := o.admin.call(ctx, http.MethodGet, "/debug/cluster", nil, &st)
	return st, err
}

func (o *clusterOpts) ls(ctx context.Context) error {
	st, err := o.status(ctx)
	if err != nil {
		return err
	}
	if o.json {
		return printJSON(o.out, st)
	}
	printStatus(o.out, st, time.Now())
	if o.shards {
		printShards(o.out, st.Shards)
	}
	return nil
}

// printShards lists each shard and who serves it.
func printShards(w io.Writer, shards []cluster.ShardStatus) {
	if len(shards) == 0 {
		fmt.Fprintln(w, "\nno streams defined")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nSTREAM\tSHARD\tKIND\tOWNER\tHOME/REPLICAS")
	for _, s := range shards {
		owner := s.Owner
		if owner == "" {
			owner = "none now"
		}
		where := s.Home
		if len(s.Replicas) > 0 {
			where = strings.Join(s.Replicas, ",")
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", s.Stream, s.Shard, s.Kind, owner, orDash(where))
	}
	tw.Flush()
}

// printStatus prints st as a table, one member a line, ages against now.
func printStatus(w io.Writer, st cluster.Status, now time.Time) {
	ready := "ready"
	if !st.Ready {
		ready = "not ready: it has not joined yet"
	}
	fmt.Fprintf(w, "cluster %s as %s sees it (%s)\n", st.Cluster, st.NodeID, ready)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tZONE\tADDR\tADMIN\tPEER\tSTATE\tSHARDS\tDURABLE\tLEADS\tREPLICAS\tLEASE LEFT\tJOINED\tACTOR MEMBER")
	for _, m := range st.Members {
		lease := leaseLeft(m.LeaseTTLLeft)
		if m.Down {
			lease = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", m.NodeID, orDash(m.Zone), orDash(m.Addr), orDash(m.Admin), orDash(m.PeerAddr),
			memberState(m, now), m.ShardsOwned, m.DurableShardsOwned, m.Leads, m.Replicas, lease, joinedAgo(m.JoinedAt, now), yesNo(m.ActorMember))
	}
	tw.Flush()
}

// memberState is up, draining, or down with when it was last seen.
func memberState(m cluster.MemberStatus, now time.Time) string {
	switch {
	case m.Down:
		return "DOWN (last seen " + joinedAgo(m.LastSeen, now) + ")"
	case m.Draining:
		return "draining"
	}
	return "up"
}

func leaseLeft(d time.Duration) string {
	if d < 0 {
		return "?" // etcd did not say
	}
	return d.Round(100 * time.Millisecond).String()
}

func joinedAgo(at, now time.Time) string {
	if at.IsZero() {
		return "-"
	}
	return now.Sub(at).Round(time.Second).String() + " ago"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// drain asks for node's drain, then (with --wait) polls until its movable
// shards are gone, printing each change, all within --timeout.
func (o *clusterOpts) drain(ctx context.Context, node string) error {
	ctx, cancel := context.WithTimeout(ctx, o.admin.timeout)
	defer cancel()
	var accepted struct {
		NodeID string `json:"node_id"`
	}
	if err := o.admin.call(ctx, http.MethodPost, "/debug/cluster/drain?node="+url.QueryEscape(node), nil, &accepted); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "draining %s: its in-memory shards move to the other members; durable shards stay\n", node)
	if !o.wait {
		fmt.Fprintf(o.out, "drain of %s requested; follow it with felix cluster ls --admin %s\n", node, o.admin.addr)
		return nil
	}
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	last := -1
	for {
		st, err := o.status(ctx)
		if ctx.Err() != nil {
			return o.drainTimedOut(ctx, node, last)
		}
		if err != nil {
			return err
		}
		m, ok := findMember(st, node)
		if !ok {
			return fmt.Errorf("%s is no longer a member (did it stop?); its shards moved when its lease ended", node)
		}
		if movable := m.ShardsOwned - m.DurableShardsOwned; movable != last {
			last = movable
			if movable == 0 {
				fmt.Fprintf(o.out, "%s drained: no in-memory shard left; %d durable shards stay on it\n", node, m.DurableShardsOwned)
				return nil
			}
			fmt.Fprintf(os.Stderr, "%s: %d in-memory shards left to move\n", node, movable)
		}
		select {
		case <-ctx.Done():
			return o.drainTimedOut(ctx, node, last)
		case <-tick.C:
		}
	}
}

// drainTimedOut ends a wait that ctx ended: an interrupt is the user's
// choice, not a failure; the deadline is.
func (o *clusterOpts) drainTimedOut(ctx context.Context, node string, left int) error {
	switch {
	case !errors.Is(context.Cause(ctx), context.DeadlineExceeded):
		fmt.Fprintf(os.Stderr, "stopped waiting; the drain of %s goes on (felix cluster ls --admin %s shows it)\n", node, o.admin.addr)
		return nil
	case left < 0:
		return fmt.Errorf("the drain of %s was accepted, but %s gave no status within %s: is it overloaded?", node, o.admin.addr, o.admin.timeout)
	}
	return fmt.Errorf("%s still has %d in-memory shards after %s; the drain goes on: wait longer with --timeout, "+
		"or see why in its log and felix cluster ls", node, left, o.admin.timeout)
}

func findMember(st cluster.Status, node string) (cluster.MemberStatus, bool) {
	for _, m := range st.Members {
		if m.NodeID == node {
			return m, true
		}
	}
	return cluster.MemberStatus{}, false
}
