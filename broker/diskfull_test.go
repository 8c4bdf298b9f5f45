//go:build linux

package broker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/config"
	"github.com/getfelix/felix-go/wire"
)

// smallFS mounts a tmpfs of size bytes on a fresh directory and unmounts it
// when t ends (lazily, if something still holds it, so a failed test never
// leaves a mount behind). It skips t when it cannot mount: not root, or no
// CAP_SYS_ADMIN (an unprivileged container).
func smallFS(t *testing.T, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs (a real full disk); run as root to test disk-full at the broker")
	}
	dir := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Skipf("cannot mount a tmpfs on %s (%v): no mount permission here, disk-full at the broker is not tested", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Logf("unmount %s: %v; detaching it lazily", dir, err)
			if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
				t.Errorf("lazy unmount %s: %v", dir, err)
			}
		}
	})
	return dir
}

// fill writes path until the file system it is on has no room left
// (ENOSPC), and returns how many bytes it took.
func fill(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	var n int64
	for {
		w, err := f.Write(chunk)
		n += int64(w)
		if errors.Is(err, syscall.ENOSPC) {
			return n
		}
		if err != nil {
			t.Fatalf("filling %s: %v", path, err)
		}
	}
}

// TestDiskFullAtTheBroker runs a broker whose data directory is on a real
// 8 MiB file system and fills it: a durable publish that cannot be written
// answers storage and is never acknowledged; in-memory streams keep
// flowing and the broker keeps serving (metadata.db, admin.token are not
// needed to do so); once space is freed the durable stream takes publishes
// again with no restart, and every acknowledged record reads back with
// offsets continuing without a gap. Under both policies that ack: on_commit
// after the fsync, periodic after the write (tmpfs's fsync cannot fail, so
// this is the write's ENOSPC either way).
func TestDiskFullAtTheBroker(t *testing.T) {
	for _, fsync := range []string{"on_commit", "periodic"} {
		t.Run(fsync, func(t *testing.T) { testDiskFull(t, fsync) })
	}
}

func testDiskFull(t *testing.T, fsync string) {
	mnt := smallFS(t, 8<<20)
	cfg := brokertest.Config(t)
	cfg.DataDir = filepath.Join(mnt, "data")
	cfg.DurableFsync = fsync
	cfg.DurableSegmentBytes = 1 << 20
	cfg.Admin = "127.0.0.1:0"
	ctx := testCtx(t, 60*time.Second)

	b := brokertest.Start(t, cfg)
	c := brokertest.Dial(t, b, cfg)
	ledger, live := client.Stream{Name: "ledger"}, client.Stream{Name: "live"}
	if _, err := c.CreateStream(ctx, ledger, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		t.Fatal(err)
	}
	liveSub, err := c.Subscribe(ctx, live, client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}

	var acked [][]byte // acked[i] is the record at offset i
	publish := func(p []byte) error {
		res, err := c.PublishResult(ctx, ledger, [][]byte{p}, client.PublishOptions{Ack: wire.AckPerBatch})
		if err != nil {
			return err
		}
		if !res.HasOffset || res.Offset != uint64(len(acked)) {
			t.Fatalf("publish acked at offset %d (present %v), want %d: offsets must continue without a gap", res.Offset, res.HasOffset, len(acked))
		}
		acked = append(acked, p)
		return nil
	}
	record := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, 4<<10) }
	for i := range 10 {
		if err := publish(record(i)); err != nil {
			t.Fatalf("publish %d with room: %v", i, err)
		}
	}

	filler := filepath.Join(mnt, "filler")
	t.Logf("filled the file system with %d bytes", fill(t, filler))
	refused := false
	// A few records may still fit in the pages the segment already has;
	// 256 records of 4 KiB are 1 MiB, far more than that slack.
	for i := len(acked); i < 256 && !refused; i++ {
		err := publish(record(i))
		switch {
		case errors.Is(err, &wire.Error{Code: wire.CodeStorage}):
			refused = true
			t.Logf("publish %d refused on a full disk: %v", i, err)
		case err != nil:
			t.Fatalf("publish %d on a full disk: %v, want a storage error", i, err)
		}
	}
	if !refused {
		t.Fatalf("no publish was refused on a full disk (%d acked)", len(acked))
	}
	// The shard stopped; the next request reopens the log, which still has
	// no room for a record that size (a smaller one could fit in the
	// segment's last page).
	if err := publish(record(len(acked))); !errors.Is(err, &wire.Error{Code: wire.CodeStorage}) {
		t.Fatalf("publish again while still full: %v, want a storage error", err)
	}
	checkStillServing(ctx, t, b, cfg, c, live, liveSub)

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// metadata.db takes definitions again, on the same broker.
	if _, err := c.CreateStream(ctx, client.Stream{Name: "after"}, client.StreamConfig{Durable: true}); err != nil {
		t.Fatalf("create a stream after freeing space, no restart: %v", err)
	}
	for i := range 10 {
		if err := publish(record(i)); err != nil {
			t.Fatalf("publish %d after freeing space, no restart: %v", i, err)
		}
	}
	checkReadsBack(ctx, t, c, ledger, acked)
}

// checkStillServing: while the disk is full, an in-memory stream's publish
// reaches its subscriber, a publish to a new in-memory name works too, a
// new connection is accepted (its token is checked against keys read at
// start: admin.token and the signing key are never written again), the
// admin endpoint answers /live, and a stream definition that does not fit
// in metadata.db's free pages answers storage (the next fits after space
// is freed: the caller checks that).
func checkStillServing(ctx context.Context, t *testing.T, b *broker.Broker, cfg config.Config, c *client.Client, live client.Stream, sub *client.Subscription) {
	t.Helper()
	for i := range 5 {
		want := fmt.Sprintf("volatile %d", i)
		if err := c.Publish(ctx, live, []byte(want), client.PublishOptions{Ack: wire.AckPerBatch}); err != nil {
			t.Fatalf("in-memory publish on a full disk: %v", err)
		}
		ev, err := sub.Next(ctx)
		if err != nil || string(ev.Payload) != want {
			t.Fatalf("in-memory event on a full disk: %q, %v; want %q", ev.Payload, err, want)
		}
	}
	c2 := brokertest.Dial(t, b, cfg)
	if err := c2.Publish(ctx, client.Stream{Name: "new-volatile"}, []byte("x"), client.PublishOptions{Ack: wire.AckPerBatch}); err != nil {
		t.Fatalf("publish to a new in-memory stream from a new connection on a full disk: %v", err)
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	if code, body, err := brokertest.Get(ctx, hc, "http://"+b.AdminAddr().String()+"/live"); err != nil || code != http.StatusOK {
		t.Fatalf("GET /live on a full disk = %d %q %v, want 200", code, body, err)
	}
	// bbolt writes into pages its file already has, so the first few
	// definitions may fit; 200 do not.
	for i := range 200 {
		_, err := c.CreateStream(ctx, client.Stream{Name: fmt.Sprintf("def%d", i)}, client.StreamConfig{Durable: true})
		if errors.Is(err, &wire.Error{Code: wire.CodeStorage}) {
			t.Logf("stream definition %d refused on a full disk: %v", i, err)
			return
		}
		if err != nil {
			t.Fatalf("create stream %d on a full disk: %v, want success or a storage error", i, err)
		}
	}
	t.Fatal("200 stream definitions fitted on a full disk; metadata.db was not tested")
}

// checkReadsBack reads the ledger from offset 0 and wants exactly acked.
func checkReadsBack(ctx context.Context, t *testing.T, c *client.Client, st client.Stream, acked [][]byte) {
	t.Helper()
	var got uint64
	for got < uint64(len(acked)) {
		page, err := c.Read(ctx, st, got, client.ReadOptions{})
		if err != nil {
			t.Fatalf("read from %d: %v", got, err)
		}
		if len(page.Records) == 0 {
			t.Fatalf("read from %d: empty page, %d records acked", got, len(acked))
		}
		for _, r := range page.Records {
			if r.Offset != got || r.Offset >= uint64(len(acked)) || !bytes.Equal(r.Payload, acked[r.Offset]) {
				t.Fatalf("record at offset %d (%d bytes), want offset %d as acked", r.Offset, len(r.Payload), got)
			}
			got++
		}
	}
	if page, err := c.Read(ctx, st, got, client.ReadOptions{}); err != nil || len(page.Records) != 0 {
		t.Fatalf("read past the last acked record: %d records, %v; want none", len(page.Records), err)
	}
}

// TestFirstStartOnAFullDisk: a broker's first start on a nearly full disk,
// with k pages free for each k from none to enough, either starts or fails
// naming the file it could not write; in both cases, once space is freed,
// the next start on the same data directory serves a durable stream. (It
// did not: a part-written metadata.db crashed the next start with SIGBUS
// or refused it, and an empty cert.pem refused it, until the operator
// deleted the file.)
func TestFirstStartOnAFullDisk(t *testing.T) {
	page := int64(os.Getpagesize())
	const enough = 16 // pages: every file a first start writes fits
	ran, failed, startedWithEnough := 0, 0, false
	for k := range int64(enough + 1) {
		t.Run(fmt.Sprintf("%d_pages_free", k), func(t *testing.T) {
			mnt := smallFS(t, 4<<20)
			ran++
			filler := filepath.Join(mnt, "filler")
			if err := os.Truncate(filler, fill(t, filler)-k*page); err != nil {
				t.Fatal(err)
			}
			cfg := brokertest.Config(t)
			cfg.DataDir = filepath.Join(mnt, "data")
			b, err := broker.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Start(); err == nil {
				ctx := testCtx(t, 10*time.Second)
				if err := b.Stop(ctx); err != nil {
					t.Fatal(err)
				}
				startedWithEnough = k == enough
			} else if errors.Is(err, syscall.ENOSPC) {
				failed++
				t.Logf("first start with %d pages free: %v", k, err)
			} else {
				t.Fatalf("first start with %d pages free: %v, want success or ENOSPC", k, err)
			}
			if err := os.Remove(filler); err != nil {
				t.Fatal(err)
			}
			ctx := testCtx(t, 20*time.Second)
			b = brokertest.Start(t, cfg)
			c := brokertest.Dial(t, b, cfg)
			st := client.Stream{Name: "after"}
			if _, err := c.CreateStream(ctx, st, client.StreamConfig{Durable: true}); err != nil {
				t.Fatal(err)
			}
			if err := c.Publish(ctx, st, []byte("x"), client.PublishOptions{Ack: wire.AckPerBatch}); err != nil {
				t.Fatal(err)
			}
		})
	}
	if ran > 0 && (failed == 0 || !startedWithEnough) {
		t.Fatalf("%d first starts failed, one with %d pages free started: %v; the range does not cover a full disk to enough room", failed, enough, startedWithEnough)
	}
}
