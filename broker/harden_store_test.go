package broker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

// TestRetentionOverflowRefused: a retention age in milliseconds that does
// not fit in a duration is refused invalid_request naming retention_age_ms
// and its range, never wrapped. Issue 11: 18446744073710 ms (584 years)
// wrapped to 0.45 ms, and retention deleted 63 of 64 records within 3 s;
// 2^63-1 ms came back as -1. The largest retention that fits keeps every
// record through many retention passes over several sealed segments.
func TestRetentionOverflowRefused(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.DurableSegmentBytes = 64 << 10 // several sealed segments: retention only deletes those
	cfg.DurableRetentionInterval = 20 * time.Millisecond
	b := brokertest.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	rc := brokertest.DialRaw(t, b, cfg)
	ctrl, _ := rc.MustHandshake(t, ctx)
	for i, ms := range []int64{18446744073710, math.MaxInt64, math.MaxInt64/int64(time.Millisecond) + 1} {
		id := uint64(10 + i)
		if err := ctrl.Send(&wire.StreamCreate{RequestID: id, Tenant: "default", Namespace: "default", Stream: "kept",
			Shards: 1, Durable: true, RetentionAgeMS: ms}); err != nil {
			t.Fatal(err)
		}
		e := expectErrorMsg(t, ctx, ctrl, id, wire.CodeInvalidRequest)
		for _, want := range []string{"retention_age_ms", "9223372036854", "0 keeps everything"} {
			if !strings.Contains(e.Message, want) {
				t.Errorf("retention_age_ms %d: refused with %q, want it to name %q", ms, e.Message, want)
			}
		}
	}

	c := brokertest.Dial(t, b, cfg)
	st := client.Stream{Name: "kept"}
	if _, err := c.StreamInfo(ctx, st); !errorCode(err, wire.CodeNotFound) {
		t.Fatalf("stream info after the refused creates: %v, want not_found (nothing was created)", err)
	}
	longest := time.Duration(math.MaxInt64/int64(time.Millisecond)) * time.Millisecond
	if _, err := c.CreateStream(ctx, st, client.StreamConfig{Shards: 1, Durable: true, RetentionAge: longest}); err != nil {
		t.Fatalf("create with the longest retention: %v", err)
	}
	payload := bytes.Repeat([]byte("r"), 4<<10)
	const n = 64
	for i := range n {
		if _, err := c.PublishResult(ctx, st, [][]byte{payload}, client.PublishOptions{Ack: wire.AckPerBatch}); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	time.Sleep(10 * cfg.DurableRetentionInterval) // ten retention passes
	info, err := c.StreamInfo(ctx, st)
	if err != nil || info.RetentionAge != longest {
		t.Fatalf("stream info: %+v, %v; want retention age %v", info, err, longest)
	}
	var got int
	for from := uint64(0); got < n; {
		p, err := c.Read(ctx, st, from, client.ReadOptions{})
		if err != nil {
			t.Fatalf("read from %d after %d records: %v (retention deleted records)", from, got, err)
		}
		if len(p.Records) == 0 {
			break
		}
		got += len(p.Records)
		from = p.Next
	}
	if got != n {
		t.Fatalf("read back %d records, want all %d", got, n)
	}
}

// errorCode reports whether err is a wire error with code.
func errorCode(err error, code wire.Code) bool {
	var we *wire.Error
	return err != nil && errors.As(err, &we) && we.Code == code
}

// TestDeleteDurableStreamUnderPublishes: a durable stream deleted while a
// client publishes to it in a loop is not turned into an in-memory stream.
// Issue 11: the publish path retried a closed shard with create enabled, and
// 13 120 publishes were acknowledged after the delete, without offsets,
// persisted nowhere. Now every publish that starts after the delete returned
// fails (not_found once the shard is gone), a success is only a publish in
// flight during the delete (it has its offset), and the stream stays gone.
func TestDeleteDurableStreamUnderPublishes(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pub, admin := brokertest.Dial(t, b, cfg), brokertest.Dial(t, b, cfg)
	st := client.Stream{Name: "doomed"}
	if _, err := admin.CreateStream(ctx, st, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		t.Fatal(err)
	}

	type result struct {
		start, end time.Time
		res        client.PublishResult
		err        error
	}
	var results []result
	acked := make(chan struct{})
	deleted := make(chan time.Time, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var deletedAt time.Time
		for i := 0; ; i++ {
			if i == 200 {
				close(acked)
			}
			start := time.Now()
			res, err := pub.PublishResult(ctx, st, [][]byte{[]byte("x")}, client.PublishOptions{Ack: wire.AckPerBatch})
			results = append(results, result{start, time.Now(), res, err})
			select {
			case deletedAt = <-deleted:
			default:
			}
			if !deletedAt.IsZero() && time.Since(deletedAt) > 500*time.Millisecond || ctx.Err() != nil {
				return
			}
		}
	}()
	<-acked
	if err := admin.DeleteStream(ctx, st); err != nil {
		t.Fatalf("delete: %v", err)
	}
	deletedAt := time.Now()
	deleted <- deletedAt
	<-done

	var after, okAfter, inMemory int
	for i, r := range results {
		if r.err == nil && !r.res.HasOffset {
			inMemory++
			if inMemory <= 3 {
				t.Errorf("publish %d acknowledged without an offset: it went to an in-memory stream", i)
			}
		}
		if r.start.After(deletedAt) {
			after++
			if r.err == nil {
				okAfter++
			} else if okAfter == 0 && after == 1 {
				t.Logf("first publish after the delete: %v", r.err)
			}
		}
	}
	if after < 10 {
		t.Fatalf("only %d publishes started after the delete; the test did not exercise it", after)
	}
	if okAfter > 0 || inMemory > 0 {
		t.Fatalf("%d of %d publishes started after the delete were acknowledged, %d of all %d without an offset; want every one refused", okAfter, after, inMemory, len(results))
	}
	last := results[len(results)-1].err
	if !errorCode(last, wire.CodeNotFound) || !strings.Contains(last.Error(), "deleted") {
		t.Errorf("last publish: %v, want not_found saying the stream was deleted", last)
	}
	if info, err := admin.StreamInfo(ctx, st); !errorCode(err, wire.CodeNotFound) {
		t.Fatalf("stream info after the delete: %+v, %v; want not_found (no implicit stream)", info, err)
	}
}

// TestDurableOpenFilesBounded: every open durable shard kept 4
// descriptors (segment, two indexes, mark) for ever; one client reached
// 20000/20000 in 11 s, and new shards then failed with "too many open
// files". Now the logs share durable_max_open_files: with more durable
// shards open than the bound, the process holds at most the bound (plus a
// margin for what the test itself opens) more than before, and every stream
// is still readable, its files reopened on demand.
func TestDurableOpenFilesBounded(t *testing.T) {
	fds := func() int {
		entries, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd:", err)
		}
		return len(entries)
	}
	cfg := brokertest.Config(t)
	cfg.DurableMaxOpenFiles = 64
	b := brokertest.Start(t, cfg)
	c := brokertest.Dial(t, b, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	before := fds()

	const streams = 150 // 600 descriptors unbounded
	const margin = 24
	for i := range streams {
		st := client.Stream{Name: fmt.Sprintf("d%d", i)}
		if _, err := c.CreateStream(ctx, st, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.PublishResult(ctx, st, [][]byte{[]byte(st.Name)}, client.PublishOptions{Ack: wire.AckPerBatch}); err != nil {
			t.Fatalf("publish to %s: %v", st.Name, err)
		}
	}
	if n := fds() - before; n > cfg.DurableMaxOpenFiles+margin {
		t.Fatalf("%d durable shards hold %d more descriptors; want at most durable_max_open_files %d + %d", streams, n, cfg.DurableMaxOpenFiles, margin)
	}
	for i := range streams {
		st := client.Stream{Name: fmt.Sprintf("d%d", i)}
		p, err := c.Read(ctx, st, 0, client.ReadOptions{})
		if err != nil || len(p.Records) != 1 || string(p.Records[0].Payload) != st.Name {
			t.Fatalf("read %s: %+v, %v; want its one record", st.Name, p, err)
		}
	}
	if n := fds() - before; n > cfg.DurableMaxOpenFiles+margin {
		t.Fatalf("after reading every stream: %d more descriptors; want at most %d + %d", n, cfg.DurableMaxOpenFiles, margin)
	}
}
