package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/getfelix/felix-go/client"
)

type groupOpts struct {
	conn    connOpts
	group   string
	start   string
	offset  uint64
	at      string
	shard   uint32
	offsets string
	all     bool
	limit   int
	json    bool
}

func newGroupCmd() *command {
	o := &groupOpts{}
	fs := newFlagSet("group")
	o.conn.register(fs)
	o.conn.registerTimeout(fs, time.Minute)
	fs.StringVar(&o.group, "group", "", "the group's name")
	fs.StringVar(&o.start, "start", "latest", "create, seek: where the cursor goes: earliest, latest, offset (--offset on --shard) or time (--time)")
	fs.Uint64Var(&o.offset, "offset", 0, "create, seek with --start offset: the offset on --shard")
	fs.StringVar(&o.at, "time", "", "create, seek with --start time: RFC 3339, e.g. 2026-01-02T15:04:05Z")
	fs.Uint32Var(&o.shard, "shard", 0, "the shard of --start offset, dead-letters, redrive and discard")
	fs.StringVar(&o.offsets, "offsets", "", "redrive, discard: comma-separated dead letters' offsets (or --all)")
	fs.BoolVar(&o.all, "all", false, "redrive, discard: every dead letter of --shard")
	fs.IntVar(&o.limit, "limit", 1000, "dead-letters: how many to list")
	fs.BoolVar(&o.json, "json", false, "print JSON")
	c := &command{
		name:  "group",
		args:  "create|ls|describe|seek|rm|dead-letters|redrive|discard",
		short: "administer consumer groups of durable streams",
		long: `Administers consumer groups: named cursors over a durable stream's shards
whose records are handed out to consumers and settled one by one (felix
consume). A record not settled in time is handed out again; after
group_max_attempts it is a dead letter (a pointer to its offset).

  felix group create --stream S --group G [--start earliest|latest|offset|time]
  felix group ls --stream S
  felix group describe --stream S --group G
  felix group seek --stream S --group G --start ... 
  felix group rm --stream S --group G
  felix group dead-letters --stream S --group G [--shard N]
  felix group redrive --stream S --group G [--shard N] --offsets 3,7 | --all
  felix group discard --stream S --group G [--shard N] --offsets 3,7 | --all`,
		flags: fs,
	}
	c.run = o.conn.bound(o.run)
	return c
}

func (o *groupOpts) run(ctx context.Context, args []string) error {
	if len(args) != 1 {
		return usagef("group needs one of create, ls, describe, seek, rm, dead-letters, redrive, discard; got %q", args)
	}
	verb := args[0]
	if err := o.conn.check(); err != nil {
		return err
	}
	if o.group == "" && verb != "ls" {
		return usagef("--group is required")
	}
	c, closeClient, err := o.conn.dialGroups(ctx)
	if err != nil {
		return err
	}
	defer closeClient()
	st := o.conn.streamRef()
	switch verb {
	case "create", "seek":
		start, err := o.groupStart()
		if err != nil {
			return err
		}
		do := c.CreateGroup
		if verb == "seek" {
			do = c.SeekGroup
		}
		info, err := do(ctx, st, o.group, start)
		if err != nil {
			return err
		}
		return o.printInfo(info)
	case "describe":
		info, err := c.DescribeGroup(ctx, st, o.group)
		if err != nil {
			return err
		}
		return o.printInfo(info)
	case "ls":
		names, err := c.ListGroups(ctx, st)
		if err != nil {
			return err
		}
		if o.json {
			return printJSON(os.Stdout, nonNil(names))
		}
		return o.printLines(nil, names)
	case "rm":
		if err := c.DeleteGroup(ctx, st, o.group); err != nil {
			return err
		}
		return o.printLines(map[string]string{"deleted": o.group}, []string{"deleted group " + o.group})
	case "dead-letters":
		offs, more, err := c.DeadLetters(ctx, st, o.group, o.shard, 0, o.limit)
		if err != nil {
			return err
		}
		lines := make([]string, len(offs))
		for i, off := range offs {
			lines[i] = strconv.FormatUint(off, 10)
		}
		if more {
			lines = append(lines, "(more)")
		}
		return o.printLines(map[string]any{"shard": o.shard, "offsets": offs, "more": more}, lines)
	case "redrive", "discard":
		return o.changeDead(ctx, c, verb)
	}
	return usagef("unknown group command %q (want create, ls, describe, seek, rm, dead-letters, redrive or discard)", verb)
}

func (o *groupOpts) groupStart() (client.GroupStart, error) {
	start := client.GroupStart{Kind: o.start, Offset: o.offset, Shard: o.shard}
	switch o.start {
	case "earliest", "latest", "offset":
	case "time":
		t, err := time.Parse(time.RFC3339Nano, o.at)
		if err != nil {
			return start, usagef("--time: %v", err)
		}
		start.Time = t
	default:
		return start, usagef("--start %q: want earliest, latest, offset or time", o.start)
	}
	return start, nil
}

func (o *groupOpts) changeDead(ctx context.Context, c groupClient, verb string) error {
	var offs []uint64
	for _, s := range strings.Split(o.offsets, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		off, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return usagef("--offsets: %q is not an offset", s)
		}
		offs = append(offs, off)
	}
	if len(offs) == 0 && !o.all {
		return usagef("%s needs --offsets or --all", verb)
	}
	do := c.Redrive
	if verb == "discard" {
		do = c.DiscardDeadLetters
	}
	n, err := do(ctx, o.conn.streamRef(), o.group, o.shard, offs, o.all)
	if err != nil {
		return err
	}
	return o.printLines(map[string]int{verb: n}, []string{fmt.Sprintf("%s: %d dead letters", verb, n)})
}

func (o *groupOpts) printLines(asJSON any, lines []string) error {
	if o.json {
		return json.NewEncoder(os.Stdout).Encode(asJSON)
	}
	for _, l := range lines {
		fmt.Println(l)
	}
	return nil
}

func (o *groupOpts) printInfo(info client.GroupInfo) error {
	if o.json {
		return printJSON(os.Stdout, groupJSON(o.conn.scope(), info))
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "group %s on %s\n", info.Group, o.conn.scope())
	fmt.Fprintln(w, "SHARD\tCURSOR\tCOMMITTED\tLAG\tIN FLIGHT\tOWED\tDEAD LETTERS\tREDELIVERED\tCONSUMERS")
	for _, s := range info.Shards {
		fmt.Fprintf(w, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", s.Shard, s.Cursor, s.Committed, s.Lag, s.InFlight, s.Owed,
			s.DeadLetters, s.Redeliveries, strings.Join(s.Consumers, ","))
	}
	return w.Flush()
}

// groupClient is what the group and consume commands ask of a broker:
// a Client's calls, or a ClusterClient's, which go to the member serving
// each group's shard and follow it when it moves.
type groupClient interface {
	CreateGroup(ctx context.Context, s client.Stream, name string, start client.GroupStart) (client.GroupInfo, error)
	SeekGroup(ctx context.Context, s client.Stream, name string, start client.GroupStart) (client.GroupInfo, error)
	DescribeGroup(ctx context.Context, s client.Stream, name string) (client.GroupInfo, error)
	ListGroups(ctx context.Context, s client.Stream) ([]string, error)
	DeleteGroup(ctx context.Context, s client.Stream, name string) error
	DeadLetters(ctx context.Context, s client.Stream, name string, shard uint32, from uint64, limit int) ([]uint64, bool, error)
	Redrive(ctx context.Context, s client.Stream, name string, shard uint32, offsets []uint64, all bool) (int, error)
	DiscardDeadLetters(ctx context.Context, s client.Stream, name string, shard uint32, offsets []uint64, all bool) (int, error)
	Group(s client.Stream, name string, opts client.GroupOptions) *client.Group
}

// dialGroups connects for the group and consume commands: with several
// --broker addresses (a cluster), a ClusterClient; with one, a Client,
// whose refusals come back at once rather than retried.
func (o *connOpts) dialGroups(ctx context.Context) (groupClient, func(), error) {
	if len(o.brokers()) == 1 {
		return o.dialClosing(ctx)
	}
	cc, err := o.dialCluster(ctx)
	if err != nil {
		return nil, nil, err
	}
	return cc, func() { closeCluster(cc) }, nil
}

// dialClosing dials, and returns with the client what closes it (within
// closeTimeout), for a deferred call.
func (o *connOpts) dialClosing(ctx context.Context) (*client.Client, func(), error) {
	c, err := o.dial(ctx)
	if err != nil {
		return nil, nil, err
	}
	return c, func() {
		cctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		_ = c.Close(cctx)
	}, nil
}

// groupDoc is a group as --json prints it, in the snake_case of the
// other commands' JSON (the client's GroupInfo has Go field names).
type groupDoc struct {
	Group  string          `json:"group"`
	Stream string          `json:"stream"`
	Shards []groupShardDoc `json:"shards"`
}

type groupShardDoc struct {
	Shard        uint32   `json:"shard"`
	Cursor       uint64   `json:"cursor"`
	Committed    uint64   `json:"committed"`
	Next         uint64   `json:"next"`
	Lag          uint64   `json:"lag"`
	InFlight     uint64   `json:"in_flight"`
	Owed         uint64   `json:"owed"`
	Waiting      uint64   `json:"waiting"`
	DeadLetters  uint64   `json:"dead_letters"`
	Redeliveries uint64   `json:"redeliveries"`
	Consumers    []string `json:"consumers"`
	CreatedAt    string   `json:"created_at"`
}

func groupJSON(scope string, info client.GroupInfo) groupDoc {
	doc := groupDoc{Group: info.Group, Stream: scope, Shards: make([]groupShardDoc, len(info.Shards))}
	for i, s := range info.Shards {
		doc.Shards[i] = groupShardDoc{
			Shard: s.Shard, Cursor: s.Cursor, Committed: s.Committed, Next: s.Next, Lag: s.Lag, InFlight: s.InFlight,
			Owed: s.Owed, Waiting: s.Waiting, DeadLetters: s.DeadLetters, Redeliveries: s.Redeliveries,
			Consumers: nonNil(s.Consumers), CreatedAt: time.UnixMilli(s.CreatedAtMS).UTC().Format(time.RFC3339Nano),
		}
	}
	return doc
}
