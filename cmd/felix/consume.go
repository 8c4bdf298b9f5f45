package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/getfelix/felix-go/client"
)

type consumeOpts struct {
	conn     connOpts
	group    string
	shard    uint32
	json     bool
	exec     string
	count    int
	consumer string
	wait     time.Duration
}

func newConsumeCmd() *command {
	o := &consumeOpts{}
	fs := newFlagSet("consume")
	o.conn.register(fs)
	o.conn.registerTimeout(fs, 0)
	fs.StringVar(&o.group, "group", "", "the consumer group (felix group create)")
	fs.Uint32Var(&o.shard, "shard", 0, "the shard to consume")
	fs.BoolVar(&o.json, "json", false, "print each record as a JSON line (offset, attempts, time, payload)")
	fs.StringVar(&o.exec, "exec", "", "run this shell command per record (payload on stdin; FELIX_OFFSET, FELIX_ATTEMPTS set): exit 0 acks, anything else nacks")
	fs.IntVar(&o.count, "count", 0, "stop after settling this many records (0: until interrupted)")
	fs.StringVar(&o.consumer, "consumer", "", "this consumer's name in felix group describe (default: felix-<pid>)")
	fs.DurationVar(&o.wait, "wait", 5*time.Second, "how long each poll waits for records")
	c := &command{
		name:  "consume",
		args:  "",
		short: "consume a durable stream through a consumer group, at least once",
		long: `Polls records from a consumer group and settles each one: printed records are
acked after printing; with --exec, a command runs per record and its exit
status acks (0) or nacks it (the record comes again, with its attempts one
higher, until it becomes a dead letter).

  felix consume --stream S --group G [--json] [--exec CMD] [--count N]`,
		flags: fs,
	}
	c.run = o.conn.bound(o.run)
	return c
}

func (o *consumeOpts) run(ctx context.Context, args []string) error {
	if len(args) != 0 {
		return usagef("consume takes no arguments; got %q", args)
	}
	if err := o.conn.check(); err != nil {
		return err
	}
	if o.group == "" {
		return usagef("--group is required")
	}
	if o.consumer == "" {
		o.consumer = "felix-" + strconv.Itoa(os.Getpid())
	}
	c, closeClient, err := o.conn.dialGroups(ctx)
	if err != nil {
		return err
	}
	defer closeClient()
	g := c.Group(o.conn.streamRef(), o.group, client.GroupOptions{Shard: o.shard, Consumer: o.consumer})
	defer g.Close()
	fmt.Fprintf(os.Stderr, "consuming %s shard %d as group %s\n", o.conn.scope(), o.shard, o.group)
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	settled := 0
	copts := client.ConsumeOptions{Batch: o.batch(), Wait: o.wait, Nacked: func(nctx context.Context, r client.GroupRecord) {
		o.reportDead(nctx, c, r)
	}}
	err = g.Consume(cctx, copts, func(hctx context.Context, r client.GroupRecord) error {
		herr := o.handle(hctx, r)
		if settled++; o.count > 0 && settled >= o.count {
			stop() // Consume settles this one, then returns
		}
		return herr
	})
	if err != nil {
		return err
	}
	if o.count > 0 && settled < o.count {
		return unfinished(ctx, fmt.Sprintf("settled %d of the %d records --count asked for", settled, o.count))
	}
	return nil
}

// reportDead says when a nacked record was its last attempt: the broker
// made it a dead letter, which no consumer is handed again until a
// redrive.
func (o *consumeOpts) reportDead(ctx context.Context, c groupClient, r client.GroupRecord) {
	offs, _, err := c.DeadLetters(ctx, o.conn.streamRef(), o.group, o.shard, r.Offset, 1)
	if err != nil || len(offs) == 0 || offs[0] != r.Offset {
		return // handed out again later (or the check failed: nothing to add)
	}
	fmt.Fprintf(os.Stderr, "offset %d is a dead letter after %d attempts: felix group dead-letters lists it, "+
		"felix group redrive --group %s --shard %d --offsets %d hands it out again\n", r.Offset, r.Attempts, o.group, o.shard, r.Offset)
}

// batch polls no more records than --count leaves to settle.
func (o *consumeOpts) batch() int {
	if o.count > 0 && o.count < 16 {
		return o.count
	}
	return 16
}

// handle prints a record, or runs --exec on it.
func (o *consumeOpts) handle(ctx context.Context, r client.GroupRecord) error {
	if o.exec == "" {
		if o.json {
			return json.NewEncoder(os.Stdout).Encode(map[string]any{
				"offset": r.Offset, "attempts": r.Attempts, "time": r.Time.Format(time.RFC3339Nano), "payload": string(r.Payload),
			})
		}
		_, err := fmt.Printf("%s\n", r.Payload)
		return err
	}
	cmd := exec.CommandContext(ctx, "sh", "-c", o.exec)
	cmd.Stdin = bytes.NewReader(r.Payload)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), fmt.Sprintf("FELIX_OFFSET=%d", r.Offset), fmt.Sprintf("FELIX_ATTEMPTS=%d", r.Attempts))
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "offset %d (attempt %d): %v: nacked\n", r.Offset, r.Attempts, err)
		return err
	}
	return nil
}
