package durable

import (
	"testing"
	"time"

	"github.com/getfelix/felix-go/persistence"
	"github.com/getfelix/felix-go/streams"
)

// TestDurableLogStamps: the adapter writes a streams.Stamp into the log and
// Stamps gives it back after a reopen, which is what a shard's producer
// table is rebuilt from.
func TestDurableLogStamps(t *testing.T) {
	dir := t.TempDir()
	cfg := persistence.Config{Fsync: persistence.FsyncNone}
	pl, err := persistence.Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var l streams.Log = Log{Log: pl}
	want := streams.Stamp{Producer: 5, Sequence: 2, Digest: 77}
	if err := l.Append(0, [][]byte{[]byte("plain")}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := l.AppendStamped(1, [][]byte{[]byte("a"), []byte("b")}, time.Now(), want); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if pl, err = persistence.Open(dir, cfg); err != nil {
		t.Fatal(err)
	}
	l = Log{Log: pl}
	defer l.Close()
	var got []streams.Stamp
	var bases []uint64
	if err := l.Stamps(l.StartOffset(), func(s streams.Stamp, base uint64, count uint32) bool {
		got, bases = append(got, s), append(bases, base, uint64(count))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != want || bases[0] != 1 || bases[1] != 2 {
		t.Fatalf("Stamps gave %v at %v; want %v at base 1, 2 records", got, bases, want)
	}
}

// TestCacheLogsTakeNoRetention: the broker's default retention would
// delete a cache's live keys with its segments: a cache's log keeps
// everything, a stream's takes the broker's retention.
func TestCacheLogsTakeNoRetention(t *testing.T) {
	logs, err := New(Config{Fsync: "periodic", RetentionBytes: 1 << 20, RetentionAge: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if cfg := logs.Config(streams.Def{Durable: true, Cache: &streams.CacheSettings{}}); cfg.RetentionBytes != 0 || cfg.RetentionAge != 0 {
		t.Fatalf("a cache's log config: %+v; want no retention", cfg)
	}
	if cfg := logs.Config(streams.Def{Durable: true}); cfg.RetentionBytes != 1<<20 {
		t.Fatalf("a stream's log config: %+v; want the broker's retention", cfg)
	}
}
