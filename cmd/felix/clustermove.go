package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/getfelix/felix-go/cluster"
)

// movePoll is how often move-replica asks how the move stands.
const movePoll = 250 * time.Millisecond

// moveReplica asks the member at --admin to move a replicated shard's
// replica from one member to another and, with --wait, follows it until
// the replica set no longer names the move.
func (o *clusterOpts) moveReplica(ctx context.Context, args []string) error {
	if len(args) != 4 {
		return usagef("move-replica needs TENANT/NAMESPACE/STREAM SHARD FROM TO, got %q", args)
	}
	stream, from, to := args[0], args[2], args[3]
	if strings.Count(stream, "/") != 2 {
		return usagef("move-replica's stream is TENANT/NAMESPACE/STREAM, got %q", stream)
	}
	shard, err := strconv.ParseUint(args[1], 10, 32)
	if err != nil {
		return usagef("move-replica's SHARD is a number, got %q", args[1])
	}
	ctx, cancel := context.WithTimeout(ctx, o.admin.timeout)
	defer cancel()
	q := url.Values{"stream": {stream}, "shard": {strconv.FormatUint(shard, 10)}}
	move := url.Values{"stream": {stream}, "shard": {q.Get("shard")}, "from": {from}, "to": {to}}
	var accepted map[string]string
	if err := o.admin.call(ctx, http.MethodPost, "/debug/cluster/move-replica?"+move.Encode(), nil, &accepted); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "moving the replica of %s shard %d from %s to %s: %s joins as a learner, catches up, becomes a voter, then %s leaves\n", stream, shard, from, to, to, from)
	if !o.wait {
		fmt.Fprintf(o.out, "move requested; follow it with felix stream info (or --wait)\n")
		return nil
	}
	tick := time.NewTicker(movePoll)
	defer tick.Stop()
	for {
		var set cluster.ReplicaSet
		if err := o.admin.call(ctx, http.MethodGet, "/debug/cluster/replicas?"+q.Encode(), nil, &set); err != nil {
			return err
		}
		if set.Move == nil {
			if _, in := set.Has(to); !in {
				return fmt.Errorf("the move ended without %s in the replica set (%v): was it moved again?", to, members(set))
			}
			fmt.Fprintf(o.out, "moved: %s shard %d is on %s\n", stream, shard, strings.Join(members(set), ", "))
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the move of %s shard %d from %s to %s is still under way after %s; it goes on (felix stream info shows the new replica's lag)", stream, shard, from, to, o.admin.timeout)
		case <-tick.C:
		}
	}
}

func members(set cluster.ReplicaSet) []string {
	var out []string
	for _, r := range set.Members {
		out = append(out, r.Node)
	}
	return out
}
