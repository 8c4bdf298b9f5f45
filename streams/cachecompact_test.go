package streams

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/getfelix/felix-go/cache"
	"github.com/getfelix/felix-go/persistence"
)

// compactLog adapts persistence.Log to a compactable shard log, as the
// broker's durableLog does (streams itself never imports persistence).
type compactLog struct{ *persistence.Log }

func (l compactLog) Append(base uint64, records [][]byte, now time.Time) error {
	_, err := l.Log.Append(base, records, now)
	return err
}

func (l compactLog) AppendStamped(uint64, [][]byte, time.Time, Stamp) error {
	panic("a cache writes no stamped batch")
}

func (l compactLog) Stamps(from uint64, fn func(Stamp, uint64, uint32) bool) error {
	return l.Log.Stamps(from, func(s persistence.Stamp, base uint64, count uint32) bool {
		return fn(Stamp{Producer: s.Producer, Sequence: s.Sequence, Digest: s.Digest}, base, count)
	})
}

func (l compactLog) EnforceRetention(now time.Time) error {
	_, err := l.Log.EnforceRetention(now)
	return err
}

func (l compactLog) Read(from uint64, maxRecords, maxBytes int) (ReadPage, error) {
	p, err := l.Log.Read(from, maxRecords, maxBytes)
	out := ReadPage{Next: p.Next}
	for _, r := range p.Records {
		out.Records = append(out.Records, Record{Offset: r.Offset, Time: r.Time, Value: r.Value})
	}
	return out, err
}

func (l compactLog) Committed() uint64 { return l.Log.NextOffset() }
func (l compactLog) Failed() error     { return l.Log.Err() }

func (l compactLog) PrepareCompaction(horizon uint64, keep func(uint64, []byte) ([]byte, bool, error)) (PreparedCompaction, error) {
	c, err := l.Log.PrepareCompaction(horizon, keep)
	if err != nil {
		return nil, err
	}
	return compactionOf{c}, nil
}

type compactionOf struct{ *persistence.Compaction }

func (c compactionOf) Commit() (CompactionStats, error) {
	st, err := c.Compaction.Commit()
	return CompactionStats{Segments: st.Segments, RecordsRemoved: st.RecordsRemoved, BytesRemoved: st.BytesRemoved}, err
}

// written is one write the test made and where it applied.
type written struct {
	offset uint64
	op     CacheOp
}

// TestCacheCompactionKeepsHistoryOverARealLog writes random puts,
// put-ifs, deletes and counter adds to a durable cache over a real log
// with small segments, waits for the shard's own compaction, and checks
// the log against a model of the rule: below the horizon, per key, exactly
// the newest History changes (none if the newest is a delete), per counter
// its newest record, every record at or above the horizon; then it
// restarts the shard on the compacted log and finds every key at the
// value and version it had, and a put-if naming one of them applies.
func TestCacheCompactionKeepsHistoryOverARealLog(t *testing.T) {
	for _, history := range []int{1, 3} {
		t.Run(fmt.Sprint("history ", history), func(t *testing.T) { testCacheCompaction(t, history) })
	}
}

func testCacheCompaction(t *testing.T, history int) {
	dir := t.TempDir()
	cfg := persistence.Config{SegmentBytes: 1024, IndexIntervalBytes: 256, Fsync: persistence.FsyncNone}
	plog, err := persistence.Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	compacted := make(chan *CacheCompacted, 16)
	shardCfg := ShardConfig{cacheExpiryInterval: 5 * time.Millisecond, OnCacheCompacted: func(c *CacheCompacted) { compacted <- c }}
	settings := CacheSettings{History: history}
	ts := spawnCacheShardOn(t, shardCfg, compactLog{plog}, settings)

	rng := rand.New(rand.NewPCG(uint64(history), 29))
	keys := []string{"a", "b", "c", "d", "e"}
	versions := map[string]uint64{}
	var log []written
	for off := uint64(0); off < 160; off++ {
		key := keys[rng.IntN(len(keys))]
		op := put(key, fmt.Sprintf("%s-%d", key, off))
		_, present := versions[key]
		switch n := rng.IntN(10); {
		case n == 0 && present:
			op = CacheOp{Record: cache.Record{Kind: cache.KindDelete, Key: key}}
		case n == 1 && present:
			op.Record.Cond = cache.Cond{Kind: cache.CondVersion, Version: versions[key]}
		case n == 2:
			op = CacheOp{Record: cache.Record{Kind: cache.KindCounterAdd, Key: "hits", Delta: 1}}
		}
		ts.applied(t, op, off)
		switch op.Record.Kind {
		case cache.KindDelete:
			delete(versions, key)
		case cache.KindPut:
			versions[key] = off
		}
		log = append(log, written{offset: off, op: op})
	}

	var c *CacheCompacted
	select {
	case c = <-compacted:
	case <-time.After(eventTimeout):
		t.Fatal("no compaction within the event timeout")
	}
	if c.RecordsRemoved == 0 || c.Horizon == 0 {
		t.Fatalf("compaction %+v removed nothing", c)
	}
	checkCompactedLog(t, plog, log, c.Horizon, history)
	res, err := ts.sys.Root.RequestFuture(ts.ref.PID, &CacheStatus{}, eventTimeout).Result()
	if st, _ := res.(*CacheStatusResult); err != nil || st == nil || st.Compactions < 1 || st.LastCompaction == nil || st.LastCompactionAt.IsZero() || st.Floor < c.Horizon {
		t.Errorf("status after a compaction: %+v, %v; want it counted, with its horizon %d as the floor", st, err, c.Horizon)
	}
	before := readCacheState(t, ts, keys)

	if err := ts.sys.Root.StopFuture(ts.sup).Wait(); err != nil {
		t.Fatal(err)
	}
	plog, err = persistence.Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := plog.CompactedBelow(); got < c.Horizon {
		t.Fatalf("reopened log compacted below %d; want at least %d", got, c.Horizon)
	}
	again := spawnCacheShardOn(t, ShardConfig{}, compactLog{plog}, settings)
	if after := readCacheState(t, again, keys); after != before {
		t.Fatalf("after a restart on the compacted log:\n%s\nwant\n%s", after, before)
	}
	for key, v := range versions {
		cas := put(key, "after")
		cas.Record.Cond = cache.Cond{Kind: cache.CondVersion, Version: v}
		again.applied(t, cas, plog.NextOffset())
		break
	}
}

// checkCompactedLog reads the compacted log and compares it with the
// model of what compaction keeps below horizon.
func checkCompactedLog(t *testing.T, l *persistence.Log, log []written, horizon uint64, history int) {
	t.Helper()
	// changes: per key, the offsets of the writes that changed it below
	// the horizon, and whether the newest deleted it.
	changes := map[string][]uint64{}
	deleted := map[string]bool{}
	var counter uint64
	hasCounter := false
	for _, w := range log {
		if w.offset >= horizon {
			break
		}
		r := w.op.Record
		switch r.Kind {
		case cache.KindCounterAdd:
			counter, hasCounter = w.offset, true
		default:
			changes[r.Key] = append(changes[r.Key], w.offset)
			deleted[r.Key] = r.Kind == cache.KindDelete
		}
	}
	want := map[uint64]bool{}
	for key, offs := range changes {
		if deleted[key] {
			continue
		}
		for _, off := range offs[max(0, len(offs)-history):] {
			want[off] = true
		}
	}
	if hasCounter {
		want[counter] = true
	}
	var got []uint64
	for next := uint64(0); next < l.NextOffset(); {
		page, err := l.Read(next, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range page.Records {
			r, err := cache.DecodeRecord(rec.Value)
			if err != nil {
				t.Fatalf("record %d: %v", rec.Offset, err)
			}
			if rec.Offset < horizon && r.Cond.Kind != cache.CondNone {
				t.Fatalf("record %d below the horizon %d kept its condition: %+v", rec.Offset, horizon, r)
			}
			got = append(got, rec.Offset)
		}
		next = page.Next
	}
	var wantOffsets []uint64
	for off := range want {
		wantOffsets = append(wantOffsets, off)
	}
	for off := horizon; off < l.NextOffset(); off++ {
		wantOffsets = append(wantOffsets, off)
	}
	slices.Sort(wantOffsets)
	if !slices.Equal(got, wantOffsets) {
		t.Fatalf("history %d, horizon %d: the log holds offsets\n%v\nwant\n%v", history, horizon, got, wantOffsets)
	}
}

// readCacheState reads every key and the counter as text.
func readCacheState(t *testing.T, ts *testShard, keys []string) string {
	t.Helper()
	var out string
	for _, k := range keys {
		got := ts.read(t, &CacheGet{Key: k})
		out += fmt.Sprintf("%s found=%v %q @%d\n", k, got.Found, got.Entry.Value, got.Entry.Version)
	}
	n := ts.read(t, &CounterGet{Key: "hits"})
	return out + fmt.Sprintf("hits %d @%d\n", n.Counter.Value, n.Counter.Version)
}

// The horizon stops at the first record newer than the resume window, so
// a watcher that left within it resumes into records compaction never
// touched; without a window it stops at the active segment.
func TestCacheHorizonKeepsTheResumeWindow(t *testing.T) {
	plog, err := persistence.Open(t.TempDir(), persistence.Config{SegmentBytes: 1024, Fsync: persistence.FsyncNone})
	if err != nil {
		t.Fatal(err)
	}
	defer plog.Close()
	now := time.Now()
	for off := range uint64(100) {
		at := now.Add(-2 * time.Hour)
		if off >= 50 {
			at = now
		}
		rec, _ := cache.AppendRecord(nil, &cache.Record{Kind: cache.KindPut, Key: "k", Value: []byte(fmt.Sprint(off))})
		if _, err := plog.Append(off, [][]byte{rec}, at); err != nil {
			t.Fatal(err)
		}
	}
	if plog.SealedEnd() <= 50 {
		t.Fatalf("the active segment starts at %d; the test wants it past 50", plog.SealedEnd())
	}
	windowed := &shard{cfg: ShardConfig{CacheResumeWindow: time.Hour}}
	if h, err := windowed.cacheHorizon(compactLog{plog}); err != nil || h != 50 {
		t.Fatalf("horizon with an hour's window: %d, %v; want 50, the first record of the last hour", h, err)
	}
	open := &shard{}
	if h, err := open.cacheHorizon(compactLog{plog}); err != nil || h != plog.SealedEnd() {
		t.Fatalf("horizon without a window: %d, %v; want the active segment's base %d", h, err, plog.SealedEnd())
	}
}

// writeReplicated has the leader propose op, commits it, and fails unless
// it applied at offset want.
func (ts *testShard) writeReplicated(t *testing.T, r *fakeReplica, op CacheOp, want uint64) {
	t.Helper()
	answers := make(chan PublishResult, 2)
	if res := ts.ref.Mailbox.TryPost(&Publish{Cache: &op, Done: func(r PublishResult) { answers <- r }}, eventTimeout); !res.Accepted() {
		t.Fatalf("cache write not admitted: %v", res)
	}
	r.proposed(t, 1)
	r.commitAll(t)
	if res := answer(t, answers); res.Err != nil || res.Cache == nil || res.Cache.Err != nil || res.Base != want {
		t.Fatalf("%s %q: %+v; want applied at %d", op.Record.Kind, op.Record.Key, res, want)
	}
}

// TestReplicatedCacheCompactsBelowWhatRaftServes: a replicated cache
// shard over a real log of raft entries compacts it, never past what its
// replica says raft no longer serves: with nothing compactable nothing
// is rewritten however much is superseded, nor while a follower may be
// copying the segments, and once the compaction point moves the horizon
// stops at it, below it the log holds exactly what the
// rule keeps, every entry keeps its index and base, and the index reads
// every key as before.
func TestReplicatedCacheCompactsBelowWhatRaftServes(t *testing.T) {
	plog, err := persistence.Open(t.TempDir(), persistence.Config{SegmentBytes: 1024, IndexIntervalBytes: 256, Fsync: persistence.FsyncNone})
	if err != nil {
		t.Fatal(err)
	}
	defer plog.Close()
	compacted := make(chan *CacheCompacted, 16)
	cfg := ShardConfig{cacheExpiryInterval: 5 * time.Millisecond, OnCacheCompacted: func(c *CacheCompacted) { compacted <- c }}
	r := &fakeReplica{entries: plog}
	ts := spawnReplicatedCacheShardOn(t, r, cfg, compactLog{plog}, CacheSettings{History: 1})
	becomeLeader(t, r, 1)
	keys := []string{"a", "b", "c", "d"}
	var log []written
	for off := uint64(0); off < 200; off++ {
		op := put(keys[off%4], fmt.Sprintf("v-%d", off))
		ts.writeReplicated(t, r, op, off)
		log = append(log, written{offset: off, op: op})
		// Far more superseded than kept, sealed segments, no window, and
		// the writes take many ticks: only the replica holds compaction
		// back.
		if st := ts.read(t, &CacheFloor{}); off%50 == 49 && (st.Floor != 0 || len(compacted) != 0) {
			t.Fatalf("compacted with nothing compactable: floor %d", st.Floor)
		}
	}
	headers := func() []persistence.Entry {
		var out []persistence.Entry
		if err := plog.EntryHeaders(plog.StartOffset(), func(e persistence.Entry) bool { out = append(out, e); return true }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	before := headers()
	state := readCacheState(t, ts, keys)
	const point = 150 // raft's compaction point moves: served from offset 150
	// While a follower may be copying the segments, nothing compacts:
	// the shard asks on three ticks, and starts nothing.
	asked := make(chan struct{}, 1)
	r.mu.Lock()
	r.compactable, r.copying, r.copyAsked = point, true, asked
	r.mu.Unlock()
	for range 3 {
		select {
		case <-asked:
		case <-time.After(eventTimeout):
			t.Fatal("the shard never asked whether a copy is under way")
		}
	}
	if st := ts.read(t, &CacheFloor{}); st.Floor != 0 || len(compacted) != 0 {
		t.Fatalf("compacted under a copy: floor %d", st.Floor)
	}
	r.mu.Lock()
	r.copying = false
	r.mu.Unlock()
	var c *CacheCompacted
	select {
	case c = <-compacted:
	case <-time.After(eventTimeout):
		t.Fatal("no compaction within the event timeout")
	}
	if c.Horizon == 0 || c.Horizon > point || c.RecordsRemoved == 0 {
		t.Fatalf("compaction %+v; want a horizon at most the compactable end %d, records removed", c, point)
	}
	checkCompactedLog(t, plog, log, c.Horizon, 1)
	after := headers()
	if len(after) != len(before) {
		t.Fatalf("%d entries after compaction, %d before", len(after), len(before))
	}
	for i, e := range after {
		b := before[i]
		if e.Index != b.Index || e.Term != b.Term || e.Base != b.Base || e.Kind != b.Kind {
			t.Fatalf("entry %d after compaction: %+v, before %+v", i, e, b)
		}
		if e.Compacted && e.Base >= c.Horizon {
			t.Fatalf("entry %d at %d, at or above the horizon %d, was compacted", e.Index, e.Base, c.Horizon)
		}
	}
	if got := readCacheState(t, ts, keys); got != state {
		t.Fatalf("after compaction:\n%s\nwant\n%s", got, state)
	}
	if st := ts.read(t, &CacheFloor{}); st.Floor != c.Horizon {
		t.Fatalf("floor %d after compaction, want the horizon %d", st.Floor, c.Horizon)
	}
}
