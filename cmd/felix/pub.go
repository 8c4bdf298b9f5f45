package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/config"
	"github.com/getfelix/felix-go/wire"
)

// maxLineBytes is the longest stdin line pub reads: the broker's default
// frame cap (max_frame_bytes), which no single message can exceed anyway.
const maxLineBytes = 16 << 20

// progressEvery is how often a --count run reports progress on stderr.
const progressEvery = time.Second

type pubOpts struct {
	conn      connOpts
	key       string
	ack       string
	count     int
	size      bytesValue
	batchSize int
	json      bool
	jsonAcks  bool
	inflight  int
	ifOffset  uint64
	idem      bool
	quiet     bool

	flags *pflag.FlagSet
}

func newPubCmd() *command {
	o := &pubOpts{size: 128}
	fs := newFlagSet("pub")
	o.flags = fs
	o.conn.register(fs)
	o.conn.registerTimeout(fs, 0)
	fs.StringVar(&o.key, "key", "", "routing key: publishes with the same key go to the same shard, in order")
	fs.StringVar(&o.ack, "ack", "message", "none (fire-and-forget), message (an ack per message) or batch (an ack per batch)")
	fs.IntVar(&o.count, "count", 0, "publish this many generated messages instead of MESSAGE arguments or standard input")
	fs.Var(&o.size, "size", "with --count: each generated message's size, bytes or a size like 1KiB")
	fs.IntVar(&o.batchSize, "batch-size", 64, "with --ack batch: messages per batch (PublishBatch)")
	fs.BoolVar(&o.json, "json", false, `print a summary object to stdout: {"published":N,"bytes":B,"seconds":S,"stream":"t/ns/s","ack":"message"}`)
	fs.IntVar(&o.inflight, "inflight", 0, "with acks: acked publishes awaiting their ack at once (0: the broker's publish window)")
	fs.BoolVar(&o.jsonAcks, "json-acks", false, `print one JSON line per acknowledged batch to stdout as its ack arrives, in order: {"offset":N,"count":M,"index":I} (offset on a durable stream; index is the batch's first message, counting this run's from 0)`)
	fs.Uint64Var(&o.ifOffset, "if-offset", 0, "publish the MESSAGE arguments as one batch only if it would start at this offset (a durable stream's next offset); otherwise nothing is written and felix exits 1 naming the stream's next offset")
	fs.BoolVar(&o.idem, "idempotent", false, "publish through an idempotent producer: each batch (each message under --ack message) is sent, and re-sent after a lost connection or a broker restart, until it is acknowledged, and written exactly once; one batch at a time (durable streams only)")
	fs.BoolVarP(&o.quiet, "quiet", "q", false, "print no progress or summary on stderr (errors still print)")
	c := &command{
		name:  "pub",
		args:  "[MESSAGE ...]",
		short: "publish messages to a stream",
		long: `Publishes each MESSAGE argument; with none (and no --count), one message per
line of standard input, until end of input or SIGINT. With --count N,
publishes N generated messages of --size bytes, reporting progress on stderr
every second. Under --ack message and --ack batch, publishes do not wait for
each other's acks: up to --inflight are unanswered at once (more wait in the
client and leave together), and pub exits once the broker acknowledged every
message; under --ack none, once it has read them all. --json-acks prints each
ack as it arrives, so a run that is killed has printed exactly what was
acknowledged.

Examples:
  felix pub --stream orders hello world
  tail -f app.log | felix pub --stream logs --ack batch
  felix pub --stream bench --count 1000000 --size 128 --ack batch --json
  felix pub --stream ledger --count 1000 --json-acks`,
		flags: fs,
	}
	c.run = o.conn.bound(o.run)
	return c
}

func (o *pubOpts) run(ctx context.Context, args []string) error {
	mode, err := o.check(args)
	if err != nil {
		return err
	}
	o.conn.publishWindow = o.inflight
	cc, err := o.conn.dialCluster(ctx)
	if err != nil {
		return err
	}
	if o.flags.Changed("if-offset") {
		defer closeCluster(cc)
		return o.publishIf(ctx, cc, args)
	}
	// One run publishes to one shard (one key): its owner's connection
	// serves the whole run, pipelined, as a single broker's did.
	c, err := cc.ClientForKey(ctx, o.conn.streamRef(), o.routingKey())
	if err != nil {
		closeCluster(cc)
		if ctx.Err() != nil {
			return unfinished(ctx, fmt.Sprintf("published nothing: no member of %s served the shard yet (%v)", o.conn.broker, err))
		}
		return o.explainPublishError(err, 0)
	}
	p, err := o.newPublisher(ctx, cc, c, mode)
	if err != nil {
		return err
	}

	start := time.Now()
	want, err := o.publishFrom(ctx, p, args)
	// Close waits for outstanding acks (their promises have all run when
	// it returns; one not answered within closeTimeout fails) and, under
	// fire-and-forget, for the broker to have read every publish (it
	// finishes the publish stream and waits for the broker's end of it), so
	// nothing handed to the client is lost by exiting. Not ctx: a stdin run
	// stopped by SIGINT still delivers what it read.
	if p.idem != nil {
		closeCtx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		_ = p.idem.Close(closeCtx) // closes the client it has (c, or a redialed one)
		cancel()
	}
	closeCluster(cc)
	if perr := p.failure(); perr != nil && (err == nil || errors.Is(err, perr)) {
		err = perr
	}
	confirmed := p.sent.Load() // what the broker is known to have taken, for errors
	if mode == wire.AckNone {
		confirmed = 0 // under fire-and-forget, the broker confirms nothing
		if err == nil {
			// A broker refuses a fire-and-forget publish (overloaded, bad
			// name) only asynchronously, on the publish stream ahead of its
			// end, so by now any refusal has arrived. A clean Close leaves
			// Err nil.
			err = c.Err()
		}
	}
	elapsed := time.Since(start)
	if err != nil {
		if ctx.Err() != nil && want > 0 {
			return unfinished(ctx, fmt.Sprintf("published %d of %d messages to %s", p.sent.Load(), want, o.conn.scope()))
		}
		if ctx.Err() != nil {
			return unfinished(ctx, fmt.Sprintf("published %d messages to %s; the last ones read were not (%v)", p.sent.Load(), o.conn.scope(), err))
		}
		return o.explainPublishError(err, confirmed)
	}

	return o.report(p, mode, elapsed)
}

// publishFrom publishes what the run was given: the arguments, --count
// generated messages, or stdin's lines. want is how many it was asked for
// (0 for stdin, which has no count).
func (o *pubOpts) publishFrom(ctx context.Context, p *publisher, args []string) (want int64, err error) {
	switch {
	case len(args) > 0:
		return int64(len(args)), p.publishArgs(ctx, args)
	case o.count > 0:
		stopProgress := o.progress(p)
		defer stopProgress()
		return int64(o.count), p.publishGenerated(ctx, o.count, int(o.size))
	default:
		return 0, p.publishLines(ctx, os.Stdin)
	}
}

type pubSummary struct {
	// FirstOffset and LastOffset are the offsets of the first and last
	// records published, on a durable stream with acks.
	FirstOffset *uint64 `json:"first_offset,omitempty"`
	LastOffset  *uint64 `json:"last_offset,omitempty"`
	Published   int64   `json:"published"`
	Bytes       int64   `json:"bytes"`
	Seconds     float64 `json:"seconds"`
	Stream      string  `json:"stream"`
	Ack         string  `json:"ack"`
}

func (o *pubOpts) check(args []string) (wire.AckMode, error) {
	if err := o.conn.check(); err != nil {
		return 0, err
	}
	mode, err := wire.ParseAckMode(o.ack)
	if err != nil {
		return 0, usagef("--ack: want none, message or batch, got %q", o.ack)
	}
	switch {
	case o.count < 0:
		return 0, usagef("--count must not be negative, got %d", o.count)
	case o.count > 0 && len(args) > 0:
		return 0, usagef("give MESSAGE arguments or --count, not both")
	case o.count == 0 && o.flags.Changed("size"):
		return 0, usagef("--size sets the size of --count's generated messages: give --count too")
	case o.size > maxLineBytes:
		return 0, usagef("--size %d is larger than the 16 MiB frame cap", o.size)
	case o.batchSize < 1:
		return 0, usagef("--batch-size must be at least 1, got %d", o.batchSize)
	case mode != wire.AckPerBatch && o.flags.Changed("batch-size"):
		return 0, usagef("--batch-size applies to --ack batch only")
	case o.inflight < 0:
		return 0, usagef("--inflight must not be negative, got %d", o.inflight)
	case mode == wire.AckNone && o.flags.Changed("inflight"):
		return 0, usagef("--inflight bounds acked publishes: not with --ack none")
	case mode == wire.AckNone && o.jsonAcks:
		return 0, usagef("--json-acks prints acks: not with --ack none")
	case o.flags.Changed("if-offset") && (len(args) == 0 || o.count > 0 || o.flags.Changed("ack") || o.jsonAcks || o.flags.Changed("key") || o.idem):
		return 0, usagef("--if-offset publishes the MESSAGE arguments as one acked batch: give messages, and not --count, --ack, --key, --json-acks or --idempotent")
	case o.idem && mode == wire.AckNone:
		return 0, usagef("--idempotent publishes are acked: not with --ack none")
	case o.idem && o.flags.Changed("inflight"):
		return 0, usagef("--idempotent sends one batch at a time: not with --inflight")
	}
	return mode, nil
}

// explainPublishError names the stream and, for a broker's refusal, its
// code without repeating "felix:".
func (o *pubOpts) explainPublishError(err error, sent int64) error {
	after := ""
	if sent > 0 {
		after = fmt.Sprintf(" after %d %s", sent, plural(sent, "message"))
	}
	var werr *wire.Error
	if errors.As(err, &werr) {
		return fmt.Errorf("the broker refused a publish to %s%s: %s: %s", o.conn.scope(), after, werr.Code, werr.Message)
	}
	return fmt.Errorf("publish to %s%s: %w", o.conn.scope(), after, err)
}

// progress prints "published X/N" every progressEvery until the returned
// func is called; a run shorter than that prints nothing.
func (o *pubOpts) progress(p *publisher) (stop func()) {
	if o.quiet {
		return func() {}
	}
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				fmt.Fprintf(os.Stderr, "published %d/%d\n", p.sent.Load(), o.count)
			case <-done:
				return
			}
		}
	}()
	return func() { close(done); <-exited }
}

// publisher sends batches in its ack mode and counts what the broker took.
// Acked batches go through Client.Produce; their promises, which run one
// at a time in publish order on the client's ack goroutine, do the
// counting and print --json-acks lines.
type publisher struct {
	c         *client.Client
	stream    client.Stream
	mode      wire.AckMode
	opts      client.PublishOptions
	batchSize int           // messages per batch under --ack batch; 1 otherwise
	acks      *bufio.Writer // --json-acks; written by promises only
	// idem, under --idempotent, publishes every acked batch in turn.
	idem *client.IdempotentProducer

	issued      int64        // messages handed to Produce; the sending goroutine's
	sent, bytes atomic.Int64 // acknowledged (or, fire-and-forget, sent); read by the progress goroutine
	failed      atomic.Pointer[error]
	// first and last are the offsets of the first and last records
	// acknowledged, on a durable stream (hasOffset). Promises write them;
	// they are read after Close, which returns after the last promise.
	first, last uint64
	hasOffset   bool
	line        []byte // a --json-acks line, reused
}

// failure is the first error an acked publish or its --json-acks line met.
func (p *publisher) failure() error {
	if e := p.failed.Load(); e != nil {
		return *e
	}
	return nil
}

func (p *publisher) fail(err error) { p.failed.CompareAndSwap(nil, &err) }

// noteOffset records an acked publish's offsets.
func (p *publisher) noteOffset(res client.PublishResult, n int) {
	if !res.HasOffset {
		return
	}
	if !p.hasOffset {
		p.first, p.hasOffset = res.Offset, true
	}
	p.last = res.Offset + uint64(n) - 1
}

// send publishes payloads in order: under --ack batch as one batch, else
// one publish each. Acked publishes return before their acks; the first
// failed one stops the next send. The client copies payloads before it
// returns, so callers may reuse them.
func (p *publisher) send(ctx context.Context, payloads [][]byte) error {
	if err := p.failure(); err != nil {
		return err
	}
	switch p.mode {
	case wire.AckNone:
		for _, pl := range payloads {
			if err := p.c.Publish(ctx, p.stream, pl, p.opts); err != nil {
				return err
			}
			p.count(1, int64(len(pl)))
		}
		return nil
	case wire.AckPerBatch:
		return p.produce(ctx, payloads)
	}
	for i := range payloads {
		if err := p.produce(ctx, payloads[i:i+1]); err != nil {
			return err
		}
	}
	return nil
}

// produce hands one acked batch to the client; under --idempotent it
// publishes it through the producer and returns once it is acknowledged.
func (p *publisher) produce(ctx context.Context, payloads [][]byte) error {
	index, n := p.issued, len(payloads)
	var size int64
	for _, pl := range payloads {
		size += int64(len(pl))
	}
	if p.idem != nil {
		res, err := p.idem.Publish(ctx, p.stream, payloads, p.opts.Key)
		if err != nil {
			return err
		}
		p.issued += int64(n)
		p.noteOffset(res, n)
		p.count(int64(n), size)
		if p.acks != nil {
			p.printAck(res, n, index)
		}
		return p.failure()
	}
	err := p.c.Produce(ctx, p.stream, payloads, p.opts, func(res client.PublishResult, err error) {
		if err != nil {
			p.fail(err)
			return
		}
		p.noteOffset(res, n)
		p.count(int64(n), size)
		if p.acks != nil {
			p.printAck(res, n, index)
		}
	})
	if err == nil {
		p.issued += int64(n)
	}
	return err
}

// printAck writes one --json-acks line and flushes it, so that whoever
// reads stdout knows of the ack before the next one is printed.
func (p *publisher) printAck(res client.PublishResult, n int, index int64) {
	b := append(p.line[:0], '{')
	if res.HasOffset {
		b = append(b, `"offset":`...)
		b = strconv.AppendUint(b, res.Offset, 10)
		b = append(b, ',')
	}
	b = append(b, `"count":`...)
	b = strconv.AppendInt(b, int64(n), 10)
	b = append(b, `,"index":`...)
	b = strconv.AppendInt(b, index, 10)
	b = append(b, "}\n"...)
	p.line = b
	_, _ = p.acks.Write(b)
	if err := p.acks.Flush(); err != nil {
		p.fail(fmt.Errorf("print an ack: %w", err))
	}
}

func (p *publisher) count(n, size int64) {
	p.bytes.Add(size)
	p.sent.Add(n)
}

func (p *publisher) publishArgs(ctx context.Context, args []string) error {
	batch := make([][]byte, 0, p.batchSize)
	for len(args) > 0 {
		batch = batch[:0]
		for len(batch) < p.batchSize && len(args) > 0 {
			batch = append(batch, []byte(args[0]))
			args = args[1:]
		}
		if err := p.send(ctx, batch); err != nil {
			return err
		}
	}
	return nil
}

// publishGenerated publishes count messages of size bytes: the message's
// number, zero-padded, a space, then a repeating alphabet, so a subscriber
// can see order and gaps. The buffers are reused from batch to batch.
func (p *publisher) publishGenerated(ctx context.Context, count, size int) error {
	width := len(strconv.Itoa(count))
	bufs := make([][]byte, min(p.batchSize, count))
	for i := range bufs {
		bufs[i] = make([]byte, size)
		for j := range bufs[i] {
			bufs[i][j] = 'a' + byte(j%26)
		}
	}
	var num []byte
	for sent := 0; sent < count; {
		batch := bufs[:min(len(bufs), count-sent)]
		if size > width {
			for i, b := range batch {
				num = strconv.AppendInt(num[:0], int64(sent+i+1), 10)
				copy(b[width-len(num):], num)
				for j := range width - len(num) {
					b[j] = '0'
				}
				b[width] = ' '
			}
		}
		if err := p.send(ctx, batch); err != nil {
			return err
		}
		sent += len(batch)
	}
	return nil
}

// publishLines publishes one message per line of r until its end, or until
// ctx ends, which is a clean stop: a pipe like `tail -f log | felix pub`
// ends with Ctrl-C. Lines are batched only from what is already read, so an
// interactive line goes out at once.
func (p *publisher) publishLines(ctx context.Context, r io.Reader) error {
	lines := make(chan []byte, 4*p.batchSize)
	readErr := make(chan error, 1)
	stop := make(chan struct{})
	defer close(stop)
	// The reader blocks in Read, which nothing can interrupt; on ctx's end it
	// is left behind, and the process exits under it.
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), maxLineBytes)
		n := 0
		for sc.Scan() {
			n++
			select {
			case lines <- bytes.Clone(sc.Bytes()):
			case <-stop:
				return
			}
		}
		if errors.Is(sc.Err(), bufio.ErrTooLong) {
			readErr <- fmt.Errorf("standard input line %d is longer than the 16 MiB frame cap", n+1)
			return
		}
		if sc.Err() != nil {
			readErr <- fmt.Errorf("read standard input: %w", sc.Err())
		}
	}()

	batch := make([][]byte, 0, p.batchSize)
	for {
		batch = batch[:0]
		select {
		case l, ok := <-lines:
			if !ok {
				return takeErr(readErr)
			}
			batch = append(batch, l)
		case <-ctx.Done():
			return nil
		}
		eof := false
	more:
		for len(batch) < p.batchSize {
			select {
			case l, ok := <-lines:
				if !ok {
					eof = true
					break more
				}
				batch = append(batch, l)
			default:
				break more
			}
		}
		if err := p.send(ctx, batch); err != nil {
			return err // interrupted or not, these lines were not published
		}
		if eof {
			return takeErr(readErr)
		}
	}
}

// takeErr returns the error in ch, or nil when there is none.
func takeErr(ch <-chan error) error {
	select {
	case err := <-ch:
		return err
	default:
		return nil
	}
}

// bytesValue is a --size flag: bytes, or a size like 1KiB (config.ParseBytes).
type bytesValue int64

var _ pflag.Value = (*bytesValue)(nil)

func (b *bytesValue) String() string { return strconv.FormatInt(int64(*b), 10) }
func (b *bytesValue) Type() string   { return "bytes" }

func (b *bytesValue) Set(s string) error {
	n, err := config.ParseBytes(s)
	if err != nil {
		return err
	}
	*b = bytesValue(n)
	return nil
}

func plural(n int64, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// formatDuration rounds d to three or so significant digits: 850µs, 2.1ms, 1.23s.
func formatDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(100 * time.Microsecond).String()
	case d < time.Minute:
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// publishIf publishes args as one conditional batch (--if-offset): written
// at the expected offset, or refused with the stream's next offset.
func (o *pubOpts) publishIf(ctx context.Context, cc *client.ClusterClient, args []string) error {
	payloads := make([][]byte, len(args))
	for i, a := range args {
		payloads[i] = []byte(a)
	}
	off, err := cc.PublishIf(ctx, o.conn.streamRef(), payloads, o.ifOffset, client.PublishOptions{})
	var refused *wire.RefusedError
	switch {
	case errors.As(err, &refused):
		if o.json {
			fmt.Printf("{\"written\":false,\"expected\":%d,\"tail\":%d}\n", refused.Expected, refused.Tail)
		}
		return fmt.Errorf("not written: %s's next offset is %d, not %d (nothing was written; read from %d to see what another writer wrote)",
			o.conn.scope(), refused.Tail, refused.Expected, refused.Expected)
	case err != nil:
		return o.explainPublishError(err, 0)
	}
	if o.json {
		fmt.Printf("{\"written\":true,\"offset\":%d,\"count\":%d}\n", off, len(payloads))
	} else if !o.quiet {
		fmt.Fprintf(os.Stderr, "published %d %s to %s at offset %d\n", len(payloads), plural(int64(len(payloads)), "message"), o.conn.scope(), off)
	}
	return nil
}

// newPublisher prepares the publishing side of a run on c, the owner's
// connection from cc: the ack mode, batch size, key, --json-acks output
// and, with --idempotent, the producer. On an error cc is closed.
func (o *pubOpts) newPublisher(ctx context.Context, cc *client.ClusterClient, c *client.Client, mode wire.AckMode) (*publisher, error) {
	var err error
	p := &publisher{c: c, stream: o.conn.streamRef(), mode: mode, batchSize: 1}
	if o.idem {
		// The producer takes c as its first client and asks cc again
		// whenever the one it has is gone: the owner's, wherever it is now.
		first := c
		p.idem, err = client.NewIdempotentProducer(ctx, func(ctx context.Context) (*client.Client, error) {
			if c := first; c != nil {
				first = nil
				return c, nil
			}
			return cc.ClientForKey(ctx, p.stream, o.routingKey())
		})
		if err != nil {
			closeCluster(cc)
			return nil, o.explainPublishError(err, 0)
		}
	}
	if o.jsonAcks {
		p.acks = bufio.NewWriter(os.Stdout)
	}
	if mode == wire.AckPerBatch {
		p.batchSize = o.batchSize
	}
	p.opts = client.PublishOptions{Ack: mode, FireAndForget: mode == wire.AckNone, Key: o.routingKey()}
	return p, nil
}

// routingKey is --key as a routing key: nil (shard 0) when not given.
func (o *pubOpts) routingKey() []byte {
	if o.key == "" {
		return nil
	}
	return []byte(o.key)
}

// report prints a finished run's summary on stderr and, with --json, stdout.
func (o *pubOpts) report(p *publisher, mode wire.AckMode, elapsed time.Duration) error {
	n, size := p.sent.Load(), p.bytes.Load()
	if !o.quiet {
		msg := fmt.Sprintf("published %d %s to %s (ack: %s) in %s", n, plural(n, "message"), o.conn.scope(), mode, formatDuration(elapsed))
		if o.count > 0 && elapsed > 0 {
			secs := elapsed.Seconds()
			msg += fmt.Sprintf(" (%.0f msg/s, %.1f MB/s)", float64(n)/secs, float64(size)/secs/1e6)
		}
		fmt.Fprintln(os.Stderr, msg)
	}
	if o.json {
		sum := pubSummary{Published: n, Bytes: size, Seconds: elapsed.Seconds(), Stream: o.conn.scope(), Ack: mode.String()}
		if p.hasOffset {
			sum.FirstOffset, sum.LastOffset = &p.first, &p.last
		}
		out, _ := json.Marshal(sum)
		if _, err := fmt.Printf("%s\n", out); err != nil {
			return err
		}
	}
	return nil
}
