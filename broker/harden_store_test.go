package broker_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/internal/brokertest"
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
