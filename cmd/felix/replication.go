package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

// info prints a stream with each shard's owner (shard_owners; in a
// cluster the member serving it, the leader of a replicated one), and for
// a replicated stream each shard's raft state as its leader sees it.
func (o *streamOpts) info(ctx context.Context, c *client.Client, info client.StreamInfo) error {
	top, err := c.ShardOwners(ctx, info.Stream)
	if err != nil {
		return fmt.Errorf("ask who owns the shards of %s: %w", o.conn.scope(), err)
	}
	rows := shardRows(top)
	if info.Replicas > 1 {
		o.addReplication(ctx, c, rows)
	}
	if o.json {
		return printJSON(os.Stdout, struct {
			streamDoc
			ShardOwners []shardRow `json:"shard_owners"`
		}{streamJSON(info), rows})
	}
	if err := o.print([]client.StreamInfo{info}); err != nil {
		return err
	}
	if info.Replicas > 1 {
		return printReplication(rows)
	}
	return printOwners(rows)
}

// shardRow is one shard of `felix stream info`: its owner, and for a
// replicated stream its leader's view of the raft group.
type shardRow struct {
	Shard uint32 `json:"shard"`
	// Owner is the member serving the shard ("" for a single broker,
	// which serves every shard itself); Addr its felix/1 address.
	Owner string `json:"owner"`
	Addr  string `json:"addr"`
	// Available is false when no member serves it now: not placed yet,
	// or durable and its member is down (Owner names that member).
	Available   bool                   `json:"available"`
	Replication *wire.ShardReplication `json:"replication,omitempty"`
	Error       string                 `json:"error,omitempty"`
}

func shardRows(top client.Topology) []shardRow {
	rows := make([]shardRow, len(top.Owners))
	for i, so := range top.Owners {
		rows[i] = shardRow{Shard: so.Shard, Owner: so.Owner.NodeID, Addr: so.Owner.Addr, Available: so.Available}
	}
	return rows
}

// addReplication asks each replicated shard's leader (its owner) for its
// view; a shard whose leader cannot be asked keeps the error.
func (o *streamOpts) addReplication(ctx context.Context, c *client.Client, rows []shardRow) {
	views := map[string]client.ReplicationView{}
	failed := map[string]error{}
	for i := range rows {
		r := &rows[i]
		if !r.Available {
			r.Error = "no leader known"
			continue
		}
		if _, seen := views[r.Addr]; !seen && failed[r.Addr] == nil {
			if v, err := o.viewAt(ctx, c, r.Addr, o.conn.streamRef()); err != nil {
				failed[r.Addr] = err
			} else {
				views[r.Addr] = v
			}
		}
		if err := failed[r.Addr]; err != nil {
			r.Error = err.Error()
			continue
		}
		for _, s := range views[r.Addr].Shards {
			if s.Shard == r.Shard {
				r.Replication = &s
			}
		}
	}
}

// viewAt asks the broker at addr ("" is the one c is connected to).
func (o *streamOpts) viewAt(ctx context.Context, c *client.Client, addr string, s client.Stream) (client.ReplicationView, error) {
	if addr == "" {
		return c.Replication(ctx, s)
	}
	other, err := o.conn.dialOne(ctx, addr)
	if err != nil {
		return client.ReplicationView{}, err
	}
	defer func() { _ = other.Close(context.Background()) }()
	return other.Replication(ctx, s)
}

// printOwners prints who serves each shard.
func printOwners(rows []shardRow) error {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "\nSHARD\tOWNER\tADDR")
	for _, r := range rows {
		owner, addr := r.Owner, r.Addr
		if owner == "" && addr == "" {
			owner, addr = "this broker", "-"
		}
		if !r.Available {
			if owner == "" {
				owner = "none yet"
			}
			owner += " (unavailable: not placed, or its member is down)"
		}
		fmt.Fprintf(w, "%d\t%s\t%s\n", r.Shard, orDash(owner), orDash(addr))
	}
	return w.Flush()
}

func printReplication(rows []shardRow) error {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "\nSHARD\tLEADER\tTERM\tCOMMIT\tAPPLIED OFFSET\tREPLICAS (lag in records)")
	for _, r := range rows {
		if r.Error != "" || r.Replication == nil {
			msg := r.Error
			if msg == "" {
				msg = "its leader did not report it"
			}
			fmt.Fprintf(w, "%d\t%s\t-\t-\t-\t%s\n", r.Shard, orDash(r.Owner), msg)
			continue
		}
		rep := r.Replication
		var reps []string
		for _, p := range rep.Replicas {
			state := fmt.Sprintf("lag %d", p.LagRecords)
			if !p.Active {
				state = "NOT HEARD FROM"
			}
			reps = append(reps, fmt.Sprintf("%s (%s)", p.Node, state))
		}
		fmt.Fprintf(w, "%d\t%s\t%d\t%d\t%d\t%s\n", r.Shard, orDash(rep.Leader), rep.Term, rep.Commit, rep.AppliedOffset, strings.Join(reps, ", "))
	}
	return w.Flush()
}
