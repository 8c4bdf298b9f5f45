package persistence

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"
)

// benchRetention keeps a benchmark's disk use bounded: appends call
// EnforceRetention every so often, deleting sealed 64 MiB segments.
const (
	benchSegmentBytes   = 64 << 20
	benchRetentionBytes = 256 << 20
)

// BenchmarkAppend measures appends of batches of 1 and 64 records of 128 B
// and 4 KiB. Under periodic one goroutine appends and nothing waits; under
// on_commit 16 goroutines append (serialized by a mutex, as the shard
// serializes them) and each waits for its batch to be durable, so group
// commit decides the throughput. fsyncs/op is reported under on_commit.
func BenchmarkAppend(b *testing.B) {
	for _, policy := range []FsyncPolicy{FsyncPeriodic, FsyncOnCommit} {
		for _, records := range []int{1, 64} {
			for _, size := range []int{128, 4096} {
				b.Run(fmt.Sprintf("%s/%dx%dB", policy, records, size), func(b *testing.B) {
					benchAppend(b, policy, records, size)
				})
			}
		}
	}
}

// BenchmarkAppendEntry is BenchmarkAppend for raft entries (AppendEntry,
// EntryRecords), the same matrix, so the two read side by side: a replica
// of a replicated shard pays this per batch.
func BenchmarkAppendEntry(b *testing.B) {
	for _, policy := range []FsyncPolicy{FsyncPeriodic, FsyncOnCommit} {
		for _, records := range []int{1, 64} {
			for _, size := range []int{128, 4096} {
				b.Run(fmt.Sprintf("%s/%dx%dB", policy, records, size), func(b *testing.B) {
					benchAppendEntry(b, policy, records, size)
				})
			}
		}
	}
}

func benchAppend(b *testing.B, policy FsyncPolicy, records, size int) {
	benchAppendWith(b, policy, records, size, func(l *Log, batch [][]byte) (Appended, error) {
		return l.Append(l.NextOffset(), batch, time.Now())
	})
}

func benchAppendEntry(b *testing.B, policy FsyncPolicy, records, size int) {
	index := uint64(0)
	benchAppendWith(b, policy, records, size, func(l *Log, batch [][]byte) (Appended, error) {
		index++ // the caller holds appendMu
		return l.AppendEntry(EntryMeta{Index: index, Term: 1}, batch, time.Now(), nil)
	})
}

// benchAppendWith runs BenchmarkAppend's loop with add as the append.
func benchAppendWith(b *testing.B, policy FsyncPolicy, records, size int, add func(*Log, [][]byte) (Appended, error)) {
	fsys := newFaultFS()
	cfg := Config{SegmentBytes: benchSegmentBytes, RetentionBytes: benchRetentionBytes, Fsync: policy}
	l := mustOpen(b, b.TempDir(), cfg, WithFS(fsys))
	defer l.Close()
	batch := make([][]byte, records)
	for i := range batch {
		batch[i] = bytes.Repeat([]byte{byte(i)}, size)
	}
	var appendMu sync.Mutex
	appendOne := func() (Appended, error) {
		appendMu.Lock()
		defer appendMu.Unlock()
		a, err := add(l, batch)
		if err == nil && a.Base%1024 == 0 {
			_, err = l.EnforceRetention(time.Now())
		}
		return a, err
	}
	syncs := fsys.logSyncs()
	b.SetBytes(int64(records * size))
	b.ResetTimer()
	start := time.Now()
	if policy == FsyncOnCommit {
		b.SetParallelism(8) // 8 × GOMAXPROCS appenders
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				a, err := appendOne()
				if err == nil {
					err = <-l.WaitDurable(a.Next)
				}
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(fsys.logSyncs()-syncs)/float64(b.N), "fsyncs/op")
	} else {
		for range b.N {
			if _, err := appendOne(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N*records)/time.Since(start).Seconds(), "records/s")
}

// BenchmarkRead measures replay: each op reads a 64 MiB log from its start
// with a Cursor and default page caps, from the page cache.
func BenchmarkRead(b *testing.B) {
	for _, size := range []int{128, 4096} {
		b.Run(fmt.Sprintf("64x%dB", size), func(b *testing.B) {
			l := mustOpen(b, b.TempDir(), Config{SegmentBytes: benchSegmentBytes / 4, Fsync: FsyncNone})
			defer l.Close()
			batch := make([][]byte, 64)
			for i := range batch {
				batch[i] = bytes.Repeat([]byte{byte(i)}, size)
			}
			for total := 0; total < 64<<20; total += 64 * size {
				if _, err := l.Append(l.NextOffset(), batch, time.Now()); err != nil {
					b.Fatal(err)
				}
			}
			end := l.NextOffset()
			b.SetBytes(int64(end) * int64(size))
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				c, err := l.Cursor(0)
				if err != nil {
					b.Fatal(err)
				}
				for c.Offset() < end {
					if _, err := c.Next(0, 0); err != nil {
						b.Fatal(err)
					}
				}
				c.Close()
			}
			b.ReportMetric(float64(b.N)*float64(end)/time.Since(start).Seconds(), "records/s")
		})
	}
}

// TestAppendDoesNotAllocate keeps the append path free of allocations once
// the log is warm: the shard calls it for every publish.
func TestAppendDoesNotAllocate(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Config{IndexIntervalBytes: 1 << 30, Fsync: FsyncNone})
	defer mustClose(t, l)
	batch := batchOf(0, 8)
	appendBatches(t, l, 2, 1)
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := l.Append(l.NextOffset(), batch, t0); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Append allocates %.1f times per call, want 0", allocs)
	}
}

// TestAppendEntryDoesNotAllocate holds AppendEntry to Append's cost: no
// allocation per entry with records once the log is warm, stamped or not.
func TestAppendEntryDoesNotAllocate(t *testing.T) {
	l := mustOpen(t, t.TempDir(), Config{IndexIntervalBytes: 1 << 30, Fsync: FsyncNone})
	defer mustClose(t, l)
	batch := batchOf(0, 8)
	stamp := &Stamp{Producer: 1, Sequence: 2, Digest: 3}
	index := uint64(0)
	add := func(stamp *Stamp) {
		index++
		if _, err := l.AppendEntry(EntryMeta{Index: index, Term: 1}, batch, t0, stamp); err != nil {
			t.Fatal(err)
		}
	}
	add(nil)
	add(stamp)
	for _, s := range []*Stamp{nil, stamp} {
		if allocs := testing.AllocsPerRun(200, func() { add(s) }); allocs != 0 {
			t.Fatalf("AppendEntry (stamp %v) allocates %.1f times per call, want 0", s, allocs)
		}
	}
}
