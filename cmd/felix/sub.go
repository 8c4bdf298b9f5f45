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
stored at or after a time.

Examples:
  felix sub --stream orders
  felix sub --stream orders --count 10 --json
  felix sub --stream orders --from-time 2026-01-02T15:04:05Z`,
		flags: fs,
	}
	c.run = o.run
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

	c, err := o.conn.dial(ctx)
	if err != nil {
		return err
	}
	defer closeClient(c)
	if byTime {
		off, err := offsetForTime(ctx, c, &o.conn, o.shard, at)
		if err != nil {
			if ctx.Err() != nil {
				return nil // interrupted before anything was asked of us
			}
			return err
		}
		so.From, so.FromOffset = client.FromOffset, off
	}
	sub, err := c.Subscribe(ctx, o.conn.streamRef(), so)
	if err != nil {
		if ctx.Err() != nil {
			return nil // interrupted before anything was asked of us
		}
		return fmt.Errorf("subscribe to %s: %w", o.conn.scope(), err)
	}
	fmt.Fprintln(os.Stderr, "subscribed")
	if o.queueCapacity > 0 && sub.QueueCapacity() != o.queueCapacity {
		fmt.Fprintf(os.Stderr, "queue capacity: asked for %d, the broker granted %d\n", o.queueCapacity, sub.QueueCapacity())
	}

	out := bufio.NewWriterSize(os.Stdout, stdoutBuffer)
	err = o.print(ctx, c, sub, out)
	if ferr := out.Flush(); err == nil {
		err = ferr
	}
	if err != nil {
		return err
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_ = sub.Close(closeCtx) // the connection's close below ends it anyway
	return nil
}

// print writes events to out until --count of them, ctx's end (nil), or the
// subscription's end (an error). It flushes out only when no event is
// immediately pending, so a busy stream is not one write per line.
func (o *subOpts) print(ctx context.Context, c *client.Client, sub *client.Subscription, out *bufio.Writer) error {
	events := sub.Events()
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	scope := o.conn.scope()
	for n := 0; o.count == 0 || n < o.count; n++ {
		var ev client.Event
		var ok bool
		select {
		case ev, ok = <-events:
		case <-ctx.Done():
			return nil
		default:
			if err := out.Flush(); err != nil {
				return err
			}
			select {
			case ev, ok = <-events:
			case <-ctx.Done():
				return nil
			}
		}
		if !ok {
			return o.subscriptionEnded(c, sub, n)
		}
		var err error
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
			return err
		}
	}
	return nil
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
// When the connection fails, the subscription only says ErrClosed; the
// client's Err holds the reason.
func (o *subOpts) subscriptionEnded(c *client.Client, sub *client.Subscription, received int) error {
	after := fmt.Sprintf("after %d %s", received, plural(int64(received), "message"))
	err := sub.Err()
	if errors.Is(err, client.ErrClosed) && c.Err() != nil {
		return fmt.Errorf("lost the connection to the broker at %s %s (did it stop?): %w", o.conn.broker, after, c.Err())
	}
	if err == nil || errors.Is(err, io.EOF) {
		return fmt.Errorf("the broker ended the subscription %s (did it stop?)", after)
	}
	return fmt.Errorf("subscription ended %s: %w", after, err)
}
