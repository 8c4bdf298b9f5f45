package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/pflag"

	"github.com/getfelix/felix-go/client"
)

// stdoutBuffer is sub's output buffer: large enough that a busy stream
// costs one write per many lines, flushed whenever no event is waiting.
const stdoutBuffer = 64 << 10

type subOpts struct {
	conn          connOpts
	count         int
	json          bool
	queueCapacity int
	shard         uint32
	from          string
	fromTime      string
	flags         *pflag.FlagSet
}

func newSubCmd() *command {
	fs := newFlagSet("sub")
	o := &subOpts{flags: fs}
	o.conn.register(fs)
	o.conn.registerTimeout(fs, 0)
	fs.IntVar(&o.count, "count", 0, "exit after this many messages (0: run until SIGINT or SIGTERM)")
	fs.BoolVar(&o.json, "json", false, `print one JSON object per message: {"stream":"t/ns/s","payload":"..."}, `+
		`plus "payload_base64" when the payload is not valid UTF-8`)
	fs.StringVar(&o.from, "from", "latest", "where to start on a durable stream: latest, earliest or an offset (history is replayed, then live)")
	fs.StringVar(&o.fromTime, "from-time", "", fromTimeUsage)
	fs.Uint32Var(&o.shard, "shard", 0, "the shard of a multi-shard stream to read (see felix stream info)")
	fs.IntVar(&o.queueCapacity, "queue-capacity", 0, "ask the broker for this subscriber queue capacity, in batches (0: the broker's default)")
	c := &command{
		name:  "sub",
		short: "subscribe to a stream and print its messages",
		long: `Subscribes to a stream and prints each message's payload on its own line of
standard output, from the moment it subscribed: messages published earlier
are not shown. It writes "subscribed" to standard error once the broker has
registered the subscription. It runs until --count messages arrived, or
until SIGINT or SIGTERM. On a durable stream, --from replays history first:
from the oldest record kept, an offset, or (--from-time) the first record
stored at or after a time. When the broker ends the subscription (its shard
moved to another member of a cluster), the connection is lost, or a durable
subscription falls behind, it says so on standard error and subscribes again
at the shard's owner: on a durable stream right after the last message it
printed, on an in-memory one from the latest.

Examples:
  felix sub --stream orders
  felix sub --stream orders --count 10 --json
  felix sub --stream orders --from-time 2026-01-02T15:04:05Z`,
		flags: fs,
	}
	c.run = o.conn.bound(o.run)
	return c
}

func (o *subOpts) run(ctx context.Context, args []string) error {
	if len(args) > 0 {
		return usagef("sub takes no arguments, got %q (the stream is --stream)", args)
	}
	if err := o.conn.check(); err != nil {
		return err
	}
	if o.count < 0 || o.queueCapacity < 0 {
		return usagef("--count and --queue-capacity must not be negative")
	}
	so := client.SubscribeOptions{QueueCapacity: o.queueCapacity, Shard: o.shard}
	var at time.Time
	byTime := o.flags.Changed("from-time")
	switch {
	case byTime:
		if o.flags.Changed("from") {
			return usagef("--from and --from-time both say where to start: give one")
		}
		var err error
		if at, err = parseFromTime(o.fromTime); err != nil {
			return err
		}
	case o.from == "latest" || o.from == "":
	case o.from == "earliest":
		so.From = client.FromEarliest
	default:
		off, perr := strconv.ParseUint(o.from, 10, 64)
		if perr != nil {
			return usagef("--from must be latest, earliest or an offset, got %q", o.from)
		}
		so.From, so.FromOffset = client.FromOffset, off
	}

	cc, err := o.conn.dialCluster(ctx)
	if err != nil {
		return err
	}
	defer closeCluster(cc)
	if byTime {
		off, err := o.offsetForTime(ctx, cc, at)
		if err != nil {
			if ctx.Err() != nil {
				return unfinished(ctx, fmt.Sprintf("not subscribed to %s yet (%v)", o.conn.scope(), err))
			}
			return err
		}
		so.From, so.FromOffset = client.FromOffset, off
	}
	sub, err := cc.Subscribe(ctx, o.conn.streamRef(), so)
	if err != nil {
		if ctx.Err() != nil {
			return unfinished(ctx, fmt.Sprintf("not subscribed to %s yet (%v)", o.conn.scope(), err))
		}
		return fmt.Errorf("subscribe to %s: %w", o.conn.scope(), err)
	}
	sub.OnResubscribe = func(cause error) {
		fmt.Fprintf(os.Stderr, "the subscription to %s shard %d ended (%v); subscribing again\n", o.conn.scope(), o.shard, cause)
	}
	fmt.Fprintln(os.Stderr, "subscribed")
	if capacity := sub.QueueCapacity(); o.queueCapacity > 0 && capacity != o.queueCapacity {
		fmt.Fprintf(os.Stderr, "queue capacity: asked for %d, the broker granted %d\n", o.queueCapacity, capacity)
	}

	out := bufio.NewWriterSize(os.Stdout, stdoutBuffer)
	n, err := o.print(ctx, sub, out)
	if ferr := out.Flush(); err == nil {
		err = ferr
	}
	if err != nil {
		return err
	}
	if o.count > 0 && n < o.count {
		return unfinished(ctx, fmt.Sprintf("%d of the %d messages --count asked for arrived", n, o.count))
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_ = sub.Close(closeCtx) // the connections' close below ends it anyway
	return nil
}

// offsetForTime resolves --from-time at the shard's owner.
func (o *subOpts) offsetForTime(ctx context.Context, cc *client.ClusterClient, at time.Time) (uint64, error) {
	c, err := cc.ClientFor(ctx, o.conn.streamRef(), o.shard)
	if err != nil {
		return 0, err
	}
	return offsetForTime(ctx, c, &o.conn, o.shard, at)
}

// print writes events to out until --count of them, ctx's end (nil), or the
// subscription's end (an error), and says how many it wrote. It flushes out only when no event is
// waiting, so a busy stream is not one write per line. The subscription
// follows its shard on its own: a moved shard, a lost connection or a lag
// are not ends.
func (o *subOpts) print(ctx context.Context, sub *client.ClusterSubscription, out *bufio.Writer) (int, error) {
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	scope := o.conn.scope()
	n := 0
	for ; o.count == 0 || n < o.count; n++ {
		if sub.Buffered() == 0 {
			if err := out.Flush(); err != nil {
				return n, err
			}
		}
		ev, err := sub.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return n, nil
			}
			return n, subscriptionEnded(err, n)
		}
		if o.json {
			row := jsonEvent(scope, ev.Payload)
			if ev.HasOffset {
				row.Offset = &ev.Offset
			}
			err = enc.Encode(row)
		} else {
			out.Write(ev.Payload) // a bufio.Writer's error sticks; the next call returns it
			err = out.WriteByte('\n')
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

type subEvent struct {
	Stream        string  `json:"stream"`
	Offset        *uint64 `json:"offset,omitempty"` // durable streams only
	Payload       string  `json:"payload"`
	PayloadBase64 string  `json:"payload_base64,omitempty"`
}

// jsonEvent holds the payload as a string; a payload that is not UTF-8
// shows with U+FFFD in "payload" and exactly in "payload_base64".
func jsonEvent(scope string, payload []byte) subEvent {
	if utf8.Valid(payload) {
		return subEvent{Stream: scope, Payload: string(payload)}
	}
	return subEvent{
		Stream:        scope,
		Payload:       strings.ToValidUTF8(string(payload), "\uFFFD"),
		PayloadBase64: base64.StdEncoding.EncodeToString(payload),
	}
}

// subscriptionEnded explains why events stopped before --count or a signal.
func subscriptionEnded(err error, received int) error {
	after := fmt.Sprintf("after %d %s", received, plural(int64(received), "message"))
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("the broker ended the subscription %s (did it stop?)", after)
	}
	return fmt.Errorf("subscription ended %s: %w", after, err)
}
