package streams

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/wire"
)

// publishAs posts an idempotent batch from producer id with sequence seq.
func (ts *testShard) publishAs(t *testing.T, id, seq uint64, payloads ...string) <-chan PublishResult {
	t.Helper()
	answers := make(chan PublishResult, 2)
	p := &Publish{Producer: &ProducerSeq{ID: id, Seq: seq}, Done: func(r PublishResult) { answers <- r }}
	for _, s := range payloads {
		p.Payloads = append(p.Payloads, []byte(s))
	}
	if r := ts.ref.Mailbox.TryPost(p, eventTimeout); !r.Accepted() {
		t.Fatalf("publish not admitted: %v", r)
	}
	return answers
}

// wantWritten checks an answer for a batch written at base.
func wantWritten(t *testing.T, r PublishResult, base uint64) {
	t.Helper()
	if r.Err != nil || r.Duplicate || r.Base != base || !r.Durable {
		t.Fatalf("answered %+v; want written at %d", r, base)
	}
}

// wantDuplicate checks an answer for a re-send of the batch written at base.
func wantDuplicate(t *testing.T, r PublishResult, base uint64) {
	t.Helper()
	if r.Err != nil || !r.Duplicate || r.Base != base {
		t.Fatalf("answered %+v; want a duplicate of the batch at %d", r, base)
	}
}

// wantRefused checks a ProducerError.
func wantRefused(t *testing.T, r PublishResult, reason string, expected uint64) {
	t.Helper()
	var pe *ProducerError
	if !errors.As(r.Err, &pe) || !errors.Is(r.Err, ErrProducer) || pe.Reason != reason || pe.Expected != expected {
		t.Fatalf("answered %+v; want ProducerError %s (expected %d)", r, reason, expected)
	}
}

func TestProducerSequenceRules(t *testing.T) {
	log := newFakeLog(0)
	ts := spawnTestShard(t, ShardConfig{}, log, false, nil)
	const p = 42

	wantRefused(t, answer(t, ts.publishAs(t, p, 3, "x")), ReasonUnknownProducer, 0)
	wantWritten(t, answer(t, ts.publishAs(t, p, 0, "a")), 0)
	wantWritten(t, answer(t, ts.publishAs(t, p, 1, "b", "c")), 1)
	wantRefused(t, answer(t, ts.publishAs(t, p, 3, "d")), ReasonSequenceGap, 2)
	wantDuplicate(t, answer(t, ts.publishAs(t, p, 1, "b", "c")), 1)
	wantDuplicate(t, answer(t, ts.publishAs(t, p, 0, "a")), 0)
	wantRefused(t, answer(t, ts.publishAs(t, p, 1, "b", "C")), ReasonSequenceReused, 0)
	// The same bytes split differently are other content.
	wantRefused(t, answer(t, ts.publishAs(t, p, 1, "bc")), ReasonSequenceReused, 0)
	if n := log.appended(); n != 3 {
		t.Fatalf("the log holds %d records; want 3: refusals and duplicates write nothing", n)
	}
	// A plain publish between idempotent ones takes its offset as usual.
	if r := answer(t, ts.publish(t, nil, "plain")); r.Err != nil || r.Base != 3 {
		t.Fatalf("plain publish: %+v", r)
	}
	// Another producer has its own sequences.
	wantWritten(t, answer(t, ts.publishAs(t, p+1, 0, "other")), 4)

	// Past the window: sequences 2..65 are remembered, 1 and 0 expired.
	for seq := uint64(2); seq <= producerWindow+1; seq++ {
		wantWritten(t, answer(t, ts.publishAs(t, p, seq, fmt.Sprint(seq))), 3+seq)
	}
	wantRefused(t, answer(t, ts.publishAs(t, p, 1, "b", "c")), ReasonSequenceExpired, 0)
	wantRefused(t, answer(t, ts.publishAs(t, p, 0, "a")), ReasonSequenceExpired, 0)
	wantDuplicate(t, answer(t, ts.publishAs(t, p, 2, "2")), 5)
	wantDuplicate(t, answer(t, ts.publishAs(t, p, producerWindow+1, fmt.Sprint(producerWindow+1))), 4+producerWindow)

	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.stamps) != producerWindow+3 { // 0 and 1, the other producer, 2..65
		t.Fatalf("%d stamped batches in the log; want %d", len(log.stamps), producerWindow+3)
	}
	if got, want := log.stamps[1], (fakeStamp{Stamp{p, 1, payloadDigest([][]byte{[]byte("b"), []byte("c")})}, 1, 2}); got != want {
		t.Fatalf("stamp of sequence 1: %+v, want %+v", got, want)
	}
}

func TestProducerRefusedWhereItCannotWork(t *testing.T) {
	mem := spawnTestShard(t, ShardConfig{RingRecords: 8}, nil, false, nil)
	if r := answer(t, mem.publishAs(t, 1, 0, "x")); !errors.Is(r.Err, ErrIdempotentInMemory) || !errors.Is(r.Err, &wire.Error{Code: wire.CodeInvalidRequest}) {
		t.Fatalf("in-memory stream answered %+v; want ErrIdempotentInMemory", r)
	}

	log := newFakeLog(0)
	ts := spawnTestShard(t, ShardConfig{}, log, false, nil)
	answers := make(chan PublishResult, 2)
	zero := uint64(0)
	ts.ref.Mailbox.TryPost(&Publish{
		Payloads: [][]byte{[]byte("x")}, ExpectedOffset: &zero, Producer: &ProducerSeq{ID: 1},
		Done: func(r PublishResult) { answers <- r },
	}, eventTimeout)
	if r := answer(t, answers); !errors.Is(r.Err, &wire.Error{Code: wire.CodeInvalidRequest}) || errors.Is(r.Err, ErrProducer) {
		t.Fatalf("conditional and idempotent publish answered %+v; want invalid_request", r)
	}
	if log.appended() != 0 {
		t.Fatal("a refused publish was written")
	}
	// The producer was not started by the refused publish.
	wantRefused(t, answer(t, ts.publishAs(t, 1, 1, "y")), ReasonUnknownProducer, 0)
}

// TestProducerTableEvictsLeastRecentlyUsed: past the bound, the producer
// used least recently is forgotten; it can start again at 0.
func TestProducerTableEvictsLeastRecentlyUsed(t *testing.T) {
	ts := spawnTestShard(t, ShardConfig{maxProducers: 3}, newFakeLog(0), false, nil)
	for id := uint64(1); id <= 3; id++ {
		wantWritten(t, answer(t, ts.publishAs(t, id, 0, "x")), id-1)
	}
	// Producer 1 is used again (a duplicate counts), so 2 is the oldest.
	wantDuplicate(t, answer(t, ts.publishAs(t, 1, 0, "x")), 0)
	wantWritten(t, answer(t, ts.publishAs(t, 4, 0, "x")), 3)
	wantRefused(t, answer(t, ts.publishAs(t, 2, 1, "y")), ReasonUnknownProducer, 0)
	wantWritten(t, answer(t, ts.publishAs(t, 1, 1, "y")), 4)
	wantWritten(t, answer(t, ts.publishAs(t, 3, 1, "y")), 5)
	wantWritten(t, answer(t, ts.publishAs(t, 4, 1, "y")), 6)
	// 2 starts again (evicting 1, now the least recently used).
	wantWritten(t, answer(t, ts.publishAs(t, 2, 0, "again")), 7)
	wantRefused(t, answer(t, ts.publishAs(t, 1, 2, "z")), ReasonUnknownProducer, 0)
}

func TestProducerTableDefaultBound(t *testing.T) {
	tab := newProducerTable(0)
	for id := range uint64(defaultMaxProducers + 10) {
		tab.record(Stamp{Producer: id}, id, 1)
	}
	if tab.len() != defaultMaxProducers {
		t.Fatalf("%d producers kept; want %d", tab.len(), defaultMaxProducers)
	}
	if _, err := tab.check(ProducerSeq{ID: 0, Seq: 1}, 0); err == nil {
		t.Fatal("the oldest producer was kept")
	}
	if adm, err := tab.check(ProducerSeq{ID: defaultMaxProducers + 9, Seq: 0}, 0); err != nil || adm.dup == nil {
		t.Fatalf("the newest producer: %+v, %v; want its batch remembered", adm, err)
	}
}

// TestProducerTableSurvivesRestarts: a panic restarts the same shard
// instance, which keeps its table; a shard stopped and opened again
// rebuilds it from the log's stamps. Either way a re-send is answered
// Duplicate with its original offset.
func TestProducerTableSurvivesRestarts(t *testing.T) {
	sys := newSystem(t)
	log := newFakeLog(0)
	var panicNext atomic.Bool
	var opens atomic.Int32
	rc := RegistryConfig{PubQueueDepth: 8, Log: zerolog.Nop(), Root: sys.Root,
		Shard: ShardConfig{beforeStep: func(s step) {
			if s == stepDeliver && panicNext.CompareAndSwap(true, false) {
				panic("injected")
			}
		}},
		OpenLog: func(Def, uint32) (Log, bool, error) { opens.Add(1); return log, false, nil },
	}
	sup := spawnSupervisor(t, sys, rc)
	spawn := func() *testShard {
		t.Helper()
		deadline := time.Now().Add(eventTimeout)
		for {
			res, err := sys.Root.RequestFuture(sup, &spawnShard{def: Def{Scope: testScope, Shards: 1, Durable: true}, shard: 0}, eventTimeout).Result()
			if err != nil {
				t.Fatal(err)
			}
			if ref := res.(*ShardRef); !ref.Mailbox.IsClosed() {
				return &testShard{sys: sys, ref: ref, sup: sup}
			}
			if time.Now().After(deadline) {
				t.Fatal("the supervisor keeps answering with the stopped shard")
			}
			time.Sleep(time.Millisecond)
		}
	}
	ts := spawn()
	wantWritten(t, answer(t, ts.publishAs(t, 7, 0, "a")), 0)
	// Written, then the shard panics before answering: the publisher sees
	// shard_unavailable and re-sends.
	panicNext.Store(true)
	if r := answer(t, ts.publishAs(t, 7, 1, "b", "c")); !errors.Is(r.Err, ErrShardRestarted) {
		t.Fatalf("publish in hand at the panic answered %+v; want ErrShardRestarted", r)
	}
	wantDuplicate(t, answer(t, ts.publishAs(t, 7, 1, "b", "c")), 1)

	if err := sys.Root.StopFuture(ts.ref.PID).Wait(); err != nil {
		t.Fatal(err)
	}
	again := spawn()
	wantDuplicate(t, answer(t, again.publishAs(t, 7, 1, "b", "c")), 1)
	wantDuplicate(t, answer(t, again.publishAs(t, 7, 0, "a")), 0)
	wantRefused(t, answer(t, again.publishAs(t, 7, 1, "other")), ReasonSequenceReused, 0)
	wantWritten(t, answer(t, again.publishAs(t, 7, 2, "d")), 3)
	if n := opens.Load(); n != 2 {
		t.Fatalf("log opened %d times; want 2", n)
	}
	if log.appended() != 4 {
		t.Fatalf("the log holds %d records; want 4", log.appended())
	}
}

// TestProducerTableRebuiltFromAnExistingLog opens a log that already holds
// stamps (written by an earlier broker run): the table is what they say.
func TestProducerTableRebuiltFromAnExistingLog(t *testing.T) {
	log := newFakeLog(0)
	for seq := range uint64(producerWindow + 3) {
		payloads := [][]byte{[]byte(fmt.Sprint(seq))}
		if err := log.AppendStamped(log.NextOffset(), payloads, time.Now(), Stamp{Producer: 9, Sequence: seq, Digest: payloadDigest(payloads)}); err != nil {
			t.Fatal(err)
		}
	}
	ts := spawnTestShard(t, ShardConfig{}, log, false, nil)
	wantDuplicate(t, answer(t, ts.publishAs(t, 9, 5, "5")), 5)
	wantRefused(t, answer(t, ts.publishAs(t, 9, 2, "2")), ReasonSequenceExpired, 0)
	wantRefused(t, answer(t, ts.publishAs(t, 9, producerWindow+5, "x")), ReasonSequenceGap, producerWindow+3)
	wantWritten(t, answer(t, ts.publishAs(t, 9, producerWindow+3, "x")), producerWindow+3)
}

// TestProducerDuplicateWaitsForTheOriginalsFsync: under on_commit a
// re-send of a batch still waiting for its fsync is answered after it, never
// before: a Duplicate promises no more than the original's ack.
func TestProducerDuplicateWaitsForTheOriginalsFsync(t *testing.T) {
	log := newFakeLog(0)
	ts := spawnTestShard(t, ShardConfig{}, log, true, nil)
	first := ts.publishAs(t, 3, 0, "a", "b")
	resent := ts.publishAs(t, 3, 0, "a", "b")
	noAnswer(t, first, "the fsync has not completed")
	noAnswer(t, resent, "the original's fsync has not completed")
	log.sync(2, nil)
	wantWritten(t, answer(t, first), 0)
	log.sync(2, nil) // the re-send waits on the same upTo
	wantDuplicate(t, answer(t, resent), 0)
	// Once durable, a re-send is answered at once.
	wantDuplicate(t, answer(t, ts.publishAs(t, 3, 0, "a", "b")), 0)
}
