package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

// replicationOf collects a replicated stream's shards as their leaders see
// them: shard_owners names each shard's leader, which is asked for its
// view. A shard whose leader cannot be asked is reported with the error.
func (o *streamOpts) replicationOf(ctx context.Context, c *client.Client, info client.StreamInfo) ([]shardReplication, error) {
	top, err := c.ShardOwners(ctx, info.Stream)
	if err != nil {
		return nil, err
	}
	views := map[string]client.ReplicationView{}
	failed := map[string]error{}
	out := make([]shardReplication, 0, len(top.Owners))
	for _, so := range top.Owners {
		row := shardReplication{ShardReplication: wire.ShardReplication{Shard: so.Shard, Leader: so.Owner.NodeID}}
		addr := so.Owner.Addr
		if !so.Available {
			row.Error = "no leader known"
			out = append(out, row)
			continue
		}
		if _, seen := views[addr]; !seen && failed[addr] == nil {
			if v, err := o.viewAt(ctx, c, addr, info.Stream); err != nil {
				failed[addr] = err
			} else {
				views[addr] = v
			}
		}
		if err := failed[addr]; err != nil {
			row.Error = err.Error()
		}
		for _, s := range views[addr].Shards {
			if s.Shard == so.Shard {
				row.ShardReplication = s
			}
		}
		out = append(out, row)
	}
	return out, nil
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

// shardReplication is one row of `felix stream info` for a replicated stream.
type shardReplication struct {
	wire.ShardReplication
	Error string `json:"error,omitempty"`
}

func (o *streamOpts) printReplication(rows []shardReplication) error {
	if o.json {
		return json.NewEncoder(os.Stdout).Encode(map[string]any{"shards": rows})
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "\nSHARD\tLEADER\tTERM\tCOMMIT\tAPPLIED OFFSET\tREPLICAS (lag in records)")
	for _, r := range rows {
		if r.Error != "" {
			fmt.Fprintf(w, "%d\t%s\t-\t-\t-\t%s\n", r.Shard, orDash(r.Leader), r.Error)
			continue
		}
		var reps []string
		for _, p := range r.Replicas {
			state := fmt.Sprintf("lag %d", p.LagRecords)
			if !p.Active {
				state = "NOT HEARD FROM"
			}
			reps = append(reps, fmt.Sprintf("%s (%s)", p.Node, state))
		}
		fmt.Fprintf(w, "%d\t%s\t%d\t%d\t%d\t%s\n", r.Shard, orDash(r.Leader), r.Term, r.Commit, r.AppliedOffset, strings.Join(reps, ", "))
	}
	return w.Flush()
}
