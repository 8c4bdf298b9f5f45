package broker_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

// TestDurableOffsetsAndRestart: on a durable stream acked publishes return
// the offset of their first record, events carry their offsets, and a
// broker restarted on the same data directory continues the offsets where
// they stopped (no offset reused), under each fsync policy.
func TestDurableOffsetsAndRestart(t *testing.T) {
	for _, fsync := range []string{"on_commit", "periodic", "none"} {
		t.Run(fsync, func(t *testing.T) {
			cfg := brokertest.Config(t)
			cfg.DurableFsync = fsync
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			st := client.Stream{Name: "ledger"}

			b := brokertest.Start(t, cfg)
			c := brokertest.Dial(t, b, cfg)
			info, err := c.CreateStream(ctx, st, client.StreamConfig{Shards: 1, Durable: true})
			if err != nil || !info.Durable {
				t.Fatalf("create durable: %+v, %v", info, err)
			}
			sub, err := c.Subscribe(ctx, st, client.SubscribeOptions{})
			if err != nil {
				t.Fatalf("subscribe: %v", err)
			}
			var next uint64
			for i := range 5 {
				batch := [][]byte{[]byte(fmt.Sprintf("r%d-a", i)), []byte(fmt.Sprintf("r%d-b", i))}
				res, err := c.PublishResult(ctx, st, batch, client.PublishOptions{Ack: wire.AckPerBatch})
				if err != nil {
					t.Fatalf("publish %d: %v", i, err)
				}
				if !res.HasOffset || res.Offset != next {
					t.Fatalf("publish %d: offset %d (present %v), want %d", i, res.Offset, res.HasOffset, next)
				}
				next += 2
			}
			for want := range next {
				ev, err := sub.Next(ctx)
				if err != nil {
					t.Fatalf("event %d: %v", want, err)
				}
				if !ev.HasOffset || ev.Offset != want {
					t.Fatalf("event %q at offset %d (present %v), want offset %d", ev.Payload, ev.Offset, ev.HasOffset, want)
				}
			}
			_ = c.Close(ctx)
			if err := b.Stop(ctx); err != nil {
				t.Fatalf("stop: %v", err)
			}

			b2 := brokertest.Start(t, cfg)
			c2 := brokertest.Dial(t, b2, cfg)
			res, err := c2.PublishResult(ctx, st, [][]byte{[]byte("after restart")}, client.PublishOptions{Ack: wire.AckPerBatch})
			if err != nil {
				t.Fatalf("publish after restart: %v", err)
			}
			if res.Offset != next {
				t.Fatalf("first offset after restart = %d, want %d (offsets continue, none reused)", res.Offset, next)
			}
		})
	}
}

// TestInMemoryEventsCarryNoOffsets: offsets are a durable stream's; an
// in-memory stream's events and acks carry none.
func TestInMemoryEventsCarryNoOffsets(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	c := brokertest.Dial(t, b, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := client.Stream{Name: "mem"}
	sub, err := c.Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.PublishResult(ctx, st, [][]byte{[]byte("x")}, client.PublishOptions{})
	if err != nil || res.HasOffset {
		t.Fatalf("in-memory publish: %+v, %v; want no offset", res, err)
	}
	ev, err := sub.Next(ctx)
	if err != nil || ev.HasOffset {
		t.Fatalf("in-memory event: %+v, %v; want no offset", ev, err)
	}
}

// TestDurableStreamDeleteRemovesData: a durable stream deleted and created
// again starts at offset 0.
func TestDurableStreamDeleteRemovesData(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	c := brokertest.Dial(t, b, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := client.Stream{Name: "gone"}
	if _, err := c.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PublishResult(ctx, st, [][]byte{[]byte("a"), []byte("b")}, client.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteStream(ctx, st); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}
	res, err := c.PublishResult(ctx, st, [][]byte{[]byte("c")}, client.PublishOptions{})
	if err != nil || res.Offset != 0 {
		t.Fatalf("first publish to the re-created stream: %+v, %v; want offset 0", res, err)
	}
	// Retention is for durable streams only.
	if _, err := c.CreateStream(ctx, client.Stream{Name: "mem"}, client.StreamConfig{RetentionAge: time.Hour}); !errors.Is(err, wire.ErrInvalidRequest) {
		t.Fatalf("retention on an in-memory stream: %v, want invalid_request", err)
	}
}

// TestRangeReadsAfterRestart: every acked record of a durable stream is read
// back, in order, after the broker restarts; pages are capped and carry the
// next offset; bad reads get typed errors.
func TestRangeReadsAfterRestart(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.DurableFsync = "on_commit"
	cfg.DurableSegmentBytes = 64 << 10 // several segments
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := client.Stream{Name: "history"}
	b := brokertest.Start(t, cfg)
	c := brokertest.Dial(t, b, cfg)
	if _, err := c.CreateStream(ctx, st, client.StreamConfig{Shards: 2, Durable: true}); err != nil {
		t.Fatal(err)
	}
	const n = 300
	for i := range n / 10 {
		batch := make([][]byte, 10)
		for j := range batch {
			batch[j] = []byte(fmt.Sprintf("rec-%03d-%s", i*10+j, make([]byte, 400)))
		}
		if _, err := c.PublishResult(ctx, st, batch, client.PublishOptions{}); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	_ = c.Close(ctx)
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	b2 := brokertest.Start(t, cfg)
	c2 := brokertest.Dial(t, b2, cfg)
	var got []uint64
	from := uint64(0)
	for {
		page, err := c2.Read(ctx, st, from, client.ReadOptions{MaxRecords: 64})
		if err != nil {
			t.Fatalf("read from %d: %v", from, err)
		}
		if len(page.Records) > 64 {
			t.Fatalf("page of %d records, asked for at most 64", len(page.Records))
		}
		for _, r := range page.Records {
			if want := fmt.Sprintf("rec-%03d-", r.Offset); string(r.Payload[:len(want)]) != want {
				t.Fatalf("record at offset %d is %q", r.Offset, r.Payload[:12])
			}
			got = append(got, r.Offset)
		}
		if page.Next >= page.Committed {
			break
		}
		from = page.Next
	}
	if len(got) != n || got[0] != 0 || got[n-1] != n-1 {
		t.Fatalf("read back %d records (first %v), want offsets 0..%d", len(got), got[:min(3, len(got))], n-1)
	}
	page, err := c2.Read(ctx, st, 10, client.ReadOptions{End: 15, HasEnd: true})
	if err != nil || len(page.Records) != 5 || page.Next != 15 {
		t.Fatalf("read [10, 15): %d records, next %d, %v; want 5 records, next 15", len(page.Records), page.Next, err)
	}
	if page, err := c2.Read(ctx, st, n, client.ReadOptions{}); err != nil || len(page.Records) != 0 {
		t.Fatalf("read at the end: %+v, %v; want an empty page, no error (reads never wait)", page, err)
	}

	if err := c2.Publish(ctx, client.Stream{Name: "volatile"}, []byte("x"), client.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	bad := []struct {
		name string
		s    client.Stream
		from uint64
		o    client.ReadOptions
		want error
	}{
		{"in the future", st, n + 5, client.ReadOptions{}, wire.ErrInvalidRequest},
		{"shard that does not exist", st, 0, client.ReadOptions{Shard: 7}, wire.ErrNotFound},
		{"in-memory stream", client.Stream{Name: "volatile"}, 0, client.ReadOptions{}, wire.ErrInvalidRequest},
		{"bad name", client.Stream{Name: "a/b"}, 0, client.ReadOptions{}, wire.ErrInvalidRequest},
		{"stream that does not exist", client.Stream{Name: "nothing"}, 0, client.ReadOptions{}, wire.ErrNotFound},
	}
	for _, tt := range bad {
		if _, err := c2.Read(ctx, tt.s, tt.from, tt.o); !errors.Is(err, tt.want) {
			t.Errorf("read %s: %v, want %v", tt.name, err, tt.want)
		}
	}
}

// TestOffsetForTime publishes two batches a millisecond apart (the wire's
// unit) and looks up times before, between and after them: the first
// record at or after the time, or the committed end. Reading from the
// answer gives only the newer records. Lookups on an in-memory stream, an
// unknown stream or shard, and from another tenant are refused.
func TestOffsetForTime(t *testing.T) {
	cfg := brokertest.Config(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := brokertest.Start(t, cfg)
	c := brokertest.Dial(t, b, cfg)
	st := client.Stream{Name: "timeline"}
	if _, err := c.CreateStream(ctx, st, client.StreamConfig{Shards: 2, Durable: true}); err != nil {
		t.Fatal(err)
	}
	publish := func(payloads ...string) uint64 {
		t.Helper()
		batch := make([][]byte, len(payloads))
		for i, p := range payloads {
			batch[i] = []byte(p)
		}
		res, err := c.PublishResult(ctx, st, batch, client.PublishOptions{})
		if err != nil {
			t.Fatalf("publish %q: %v", payloads, err)
		}
		return res.Offset
	}
	lookup := func(at time.Time) uint64 {
		t.Helper()
		off, err := c.OffsetForTime(ctx, st, at, 0)
		if err != nil {
			t.Fatalf("OffsetForTime(%s): %v", at.Format(time.RFC3339Nano), err)
		}
		return off
	}

	if off := lookup(time.Now()); off != 0 {
		t.Fatalf("OffsetForTime on an empty shard = %d, want 0", off)
	}
	before := time.Now()
	publish("old-0", "old-1", "old-2")
	afterOld := time.Now()
	sleepPast(afterOld)
	between := time.Now() // a later millisecond than every old record
	newBase := publish("new-0", "new-1")
	afterNew := time.Now()
	sleepPast(afterNew)
	after := time.Now()
	end := newBase + 2

	tests := []struct {
		name string
		give time.Time
		want uint64
	}{
		{"long before everything", time.Unix(0, 0), 0},
		{"just before everything", before, 0},
		{"between the batches", between, newBase},
		{"after everything", after, end},
		{"far in the future", time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC), end},
	}
	for _, tt := range tests {
		if got := lookup(tt.give); got != tt.want {
			t.Errorf("OffsetForTime(%s, %s) = %d, want %d", tt.name, tt.give.Format(time.RFC3339Nano), got, tt.want)
		}
	}
	page, err := c.Read(ctx, st, lookup(between), client.ReadOptions{})
	if err != nil || len(page.Records) != 2 || string(page.Records[0].Payload) != "new-0" || page.Records[0].Time.Before(between.Truncate(time.Millisecond)) {
		t.Fatalf("read from the offset for the time between: %+v, %v; want new-0 and new-1", page.Records, err)
	}
	if off, err := c.OffsetForTime(ctx, st, before, 1); err != nil || off != 0 {
		t.Errorf("OffsetForTime on the empty shard 1 = %d, %v; want 0", off, err)
	}

	if err := c.Publish(ctx, client.Stream{Name: "volatile"}, []byte("x"), client.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	bad := []struct {
		name  string
		s     client.Stream
		shard uint32
		want  error
	}{
		{"in-memory stream", client.Stream{Name: "volatile"}, 0, wire.ErrInvalidRequest},
		{"shard that does not exist", st, 7, wire.ErrNotFound},
		{"stream that does not exist", client.Stream{Name: "nothing"}, 0, wire.ErrNotFound},
		{"bad name", client.Stream{Name: "a/b"}, 0, wire.ErrInvalidRequest},
		{"another tenant's stream", client.Stream{Tenant: "other", Name: "timeline"}, 0, wire.ErrForbidden},
	}
	for _, tt := range bad {
		if _, err := c.OffsetForTime(ctx, tt.s, before, tt.shard); !errors.Is(err, tt.want) {
			t.Errorf("OffsetForTime on a %s: %v, want %v", tt.name, err, tt.want)
		}
	}
	if _, err := c.OffsetForTime(ctx, client.Stream{Name: "volatile"}, before, 0); err == nil || !strings.Contains(err.Error(), "time lookups need a durable stream") {
		t.Errorf("OffsetForTime on an in-memory stream: %v, want it to say time lookups need a durable stream", err)
	}
	other := brokertest.DialOptions(t, b, cfg, client.Options{Tenant: "other"})
	if _, err := other.OffsetForTime(ctx, client.Stream{Tenant: "default", Name: "timeline"}, before, 0); !errors.Is(err, wire.ErrForbidden) {
		t.Errorf("OffsetForTime from tenant other on default's stream: %v, want %v", err, wire.ErrForbidden)
	}
	publishOnly := brokertest.DialOptions(t, b, cfg, client.Options{Token: brokertest.Token(t, cfg, "default", "stream.publish:default/*")})
	if _, err := publishOnly.OffsetForTime(ctx, st, before, 0); !errors.Is(err, wire.ErrForbidden) {
		t.Errorf("OffsetForTime with only stream.publish: %v, want %v", err, wire.ErrForbidden)
	}
}

// sleepPast returns once the wall clock is in a later millisecond than t,
// so that whatever is stored from then on is in a later millisecond than
// anything stored before t: time lookups are in milliseconds. It takes a
// millisecond or two.
func sleepPast(t time.Time) {
	for time.Now().UnixMilli() <= t.UnixMilli() {
		time.Sleep(time.Millisecond)
	}
}

// TestUnusableDataDirectory: a data directory that cannot be used stops the
// broker at start with a message naming it; a durable shard whose log
// directory cannot be made refuses publishes with a storage error (no ack
// for anything not written) while the broker keeps serving other streams.
func TestUnusableDataDirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := brokertest.Config(t)
	cfg.DataDir = file
	b, err := broker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err == nil || !strings.Contains(err.Error(), file) {
		_ = b.Stop(context.Background())
		t.Fatalf("start on a file as data dir: %v, want an error naming %s", err, file)
	}

	cfg = brokertest.Config(t)
	good := brokertest.Start(t, cfg)
	c := brokertest.Dial(t, good, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := client.Stream{Name: "blocked"}
	if _, err := c.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}
	// The shard's log would live under <data>/streams: make that a file.
	if err := os.WriteFile(filepath.Join(cfg.DataDir, "streams"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PublishResult(ctx, st, [][]byte{[]byte("x")}, client.PublishOptions{}); !errors.Is(err, &wire.Error{Code: wire.CodeStorage}) {
		t.Fatalf("publish to a durable stream whose log cannot open: %v, want a storage error", err)
	}
	if err := c.Publish(ctx, client.Stream{Name: "fine"}, []byte("y"), client.PublishOptions{}); err != nil {
		t.Fatalf("another stream after the storage failure: %v", err)
	}
}

// TestRetentionMakesOldOffsetsTooOld: retention deletes whole old segments;
// a read or subscribe below what it kept gets too_old with the nearest
// usable offset, and that offset works.
func TestRetentionMakesOldOffsetsTooOld(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.DurableSegmentBytes = 64 << 10
	cfg.DurableRetentionInterval = 50 * time.Millisecond
	b := brokertest.Start(t, cfg)
	c := brokertest.Dial(t, b, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := client.Stream{Name: "short"}
	if _, err := c.CreateStream(ctx, st, client.StreamConfig{Durable: true, RetentionBytes: 128 << 10}); err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 1024)
	for range 50 {
		batch := [][]byte{payload, payload, payload, payload, payload, payload, payload, payload}
		if _, err := c.PublishResult(ctx, st, batch, client.PublishOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Retention runs on the shard's own timer: there is no event to await
	// from outside, so poll the read until it says too_old (bounded).
	var tooOld error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := c.Read(ctx, st, 0, client.ReadOptions{}); errors.Is(err, wire.ErrNotFound) {
			tooOld = err
			break
		}
	}
	if tooOld == nil || !strings.Contains(tooOld.Error(), "too_old") {
		t.Fatalf("read at 0 after retention: %v, want too_old", tooOld)
	}
	_, err := c.Subscribe(ctx, st, client.SubscribeOptions{From: client.FromOffset, FromOffset: 0})
	var cursor *wire.CursorError
	if !errors.As(err, &cursor) || cursor.Reason != "too_old" || cursor.Available == 0 {
		t.Fatalf("subscribe at 0 after retention: %v, want too_old with the oldest kept offset", err)
	}
	page, err := c.Read(ctx, st, cursor.Available, client.ReadOptions{MaxRecords: 1})
	if err != nil || len(page.Records) != 1 || page.Records[0].Offset != cursor.Available {
		t.Fatalf("read at the available offset %d: %+v, %v", cursor.Available, page, err)
	}
}

// TestFollowerReadOnAnUnreplicatedStream: a follower read of a stream with
// one copy is a plain read (there is no follower to answer it), and a lag
// past wire.MaxFollowerLagMS is refused.
func TestFollowerReadOnAnUnreplicatedStream(t *testing.T) {
	cfg := brokertest.Config(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := brokertest.Start(t, cfg)
	c := brokertest.Dial(t, b, cfg)
	st := client.Stream{Name: "one-copy"}
	if _, err := c.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}
	if err := c.Publish(ctx, st, []byte("a"), client.PublishOptions{}); err != nil {
		t.Fatal(err)
	}
	page, err := c.Read(ctx, st, 0, client.ReadOptions{FollowerMaxLag: time.Second})
	if err != nil || len(page.Records) != 1 || page.Committed != 1 || page.Follower {
		t.Fatalf("follower read of an unreplicated stream: %+v, %v; want the one record, committed 1, not from a follower", page, err)
	}
	if _, err := c.Read(ctx, st, 0, client.ReadOptions{FollowerMaxLag: 2 * time.Minute}); !errors.Is(err, wire.ErrInvalidRequest) {
		t.Fatalf("follower read with a lag of 2 minutes: %v; want invalid_request", err)
	}
}
