package streams

import (
	"container/list"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cespare/xxhash/v2"

	"github.com/getfelix/felix-go/wire"
)

// Idempotent producers: a publish may carry its producer's per-shard
// sequence (Publish.Producer). The shard keeps a table of producers, checks
// each sequence where offsets are assigned (check) and writes the batch's
// Stamp with it, so the table can be rebuilt from the log when the shard
// opens it (openLog): a re-send of a batch the shard wrote, even across a
// restart, is answered with its original offsets and written again never.

// ProducerSeq makes a publish idempotent: the producer's per-shard sequence.
type ProducerSeq struct{ ID, Seq uint64 }

// ErrProducer matches (errors.Is) every *ProducerError.
var ErrProducer = errors.New("streams: idempotent producer refused")

// Reasons a ProducerError gives.
const (
	ReasonSequenceGap     = "sequence_gap"     // the sequence skips ahead: Expected is the next one
	ReasonUnknownProducer = "unknown_producer" // no state for the producer, and the sequence is not 0
	ReasonSequenceReused  = "sequence_reused"  // a remembered sequence with other content
	ReasonSequenceExpired = "sequence_expired" // a sequence older than the remembered batches
)

// ProducerError refuses an idempotent publish; nothing was written.
type ProducerError struct {
	Reason   string // "sequence_gap", "unknown_producer", "sequence_reused", "sequence_expired"
	Expected uint64 // for sequence_gap: the sequence the shard expects next
}

func (e *ProducerError) Error() string {
	if e.Reason == ReasonSequenceGap {
		return fmt.Sprintf("streams: idempotent producer refused: %s, expected sequence %d", e.Reason, e.Expected)
	}
	return "streams: idempotent producer refused: " + e.Reason
}

func (e *ProducerError) Unwrap() error { return ErrProducer }

// ErrIdempotentInMemory refuses an idempotent publish to an in-memory
// stream: the producer state lives in the log, and there is none.
var ErrIdempotentInMemory = wire.NewError(wire.CodeInvalidRequest, "idempotent publishes (a producer sequence) need a durable stream")

// errProducerConditional refuses a publish that is both conditional and
// idempotent: each has its own answer to a re-send, and they conflict.
var errProducerConditional = wire.NewError(wire.CodeInvalidRequest, "a publish is either conditional (an expected offset) or idempotent (a producer sequence), not both")

// Stamp is what an idempotent batch carries into the log (the broker maps
// it onto persistence.Stamp): its producer, sequence and content digest.
type Stamp struct{ Producer, Sequence, Digest uint64 }

const (
	// producerWindow is how many of its latest batches the shard remembers
	// per producer: a re-send of an older one is sequence_expired.
	producerWindow = 64
	// defaultMaxProducers bounds the table per shard; the least recently
	// used producer is forgotten first (its next publish other than a
	// sequence 0 is unknown_producer). At about 2 KiB per producer, a full
	// table is about 8 MiB.
	defaultMaxProducers = 4096
)

// payloadDigest is a batch's digest: xxHash64 over each record's u32
// length, big-endian, and bytes, so that a re-send can be told from another
// batch under the same sequence. It is stored in the log's batch stamps,
// so it must never change. xxHash rather than CRC-64: the
// digest is computed on every idempotent publish, and CRC-64 (hash/crc64)
// took about 6 % of the CPU of sequential idempotent publishing.
func payloadDigest(payloads [][]byte) uint64 {
	d := xxhash.New()
	var n [4]byte
	for _, p := range payloads {
		binary.BigEndian.PutUint32(n[:], uint32(len(p)))
		_, _ = d.Write(n[:])
		_, _ = d.Write(p)
	}
	return d.Sum64()
}

// producerBatch is one written batch a producer's state remembers.
type producerBatch struct {
	seq, base uint64
	count     uint32
	digest    uint64
}

// producerState is one producer's sequences on one shard. Its sequences
// are consecutive from the last start (a 0 with no state), so the batch of
// sequence q is at batches[q%producerWindow] while remembered.
type producerState struct {
	id         uint64
	last       uint64 // the last sequence written
	remembered int    // batches remembered: last, last-1, …, at most producerWindow
	batches    [producerWindow]producerBatch
}

// producerTable is a shard's producers, least recently used forgotten
// first. Only the shard's Receive touches it.
type producerTable struct {
	max  int
	byID map[uint64]*list.Element // of *producerState
	lru  list.List                // most recently used at the front
}

func newProducerTable(max int) *producerTable {
	if max <= 0 {
		max = defaultMaxProducers
	}
	return &producerTable{max: max, byID: make(map[uint64]*list.Element)}
}

// admission is what check decided for a publish it let through.
type admission struct {
	stamp *Stamp         // an idempotent batch: write it with this stamp
	dup   *producerBatch // a re-send of a remembered batch: answer it, write nothing
}

// check applies the sequence rules to producer p's batch with digest d.
func (t *producerTable) check(p ProducerSeq, digest uint64) (admission, error) {
	stamp := &Stamp{Producer: p.ID, Sequence: p.Seq, Digest: digest}
	e := t.byID[p.ID]
	if e == nil {
		if p.Seq != 0 {
			return admission{}, &ProducerError{Reason: ReasonUnknownProducer}
		}
		return admission{stamp: stamp}, nil
	}
	t.lru.MoveToFront(e)
	st := e.Value.(*producerState)
	switch {
	case p.Seq == st.last+1:
		return admission{stamp: stamp}, nil
	case p.Seq > st.last:
		return admission{}, &ProducerError{Reason: ReasonSequenceGap, Expected: st.last + 1}
	case st.last-p.Seq >= uint64(st.remembered):
		return admission{}, &ProducerError{Reason: ReasonSequenceExpired}
	}
	b := &st.batches[p.Seq%producerWindow]
	if b.digest != digest {
		return admission{}, &ProducerError{Reason: ReasonSequenceReused}
	}
	return admission{dup: b}, nil
}

// record remembers a batch written with stamp st at base. It is called for
// every stamped batch written, in log order, live and when the table is
// rebuilt from the log, so both build the same table (but for the order of
// use, which only duplicates change).
func (t *producerTable) record(st Stamp, base uint64, count uint32) {
	e := t.byID[st.Producer]
	var ps *producerState
	if e == nil {
		if t.lru.Len() >= t.max {
			oldest := t.lru.Back()
			delete(t.byID, oldest.Value.(*producerState).id)
			t.lru.Remove(oldest)
		}
		ps = &producerState{id: st.Producer}
		t.byID[st.Producer] = t.lru.PushFront(ps)
	} else {
		t.lru.MoveToFront(e)
		ps = e.Value.(*producerState)
		if st.Sequence != ps.last+1 {
			// A start again (sequence 0 after the state was forgotten):
			// what came before is another run of the producer.
			ps.remembered = 0
		}
	}
	ps.last = st.Sequence
	ps.remembered = min(ps.remembered+1, producerWindow)
	ps.batches[st.Sequence%producerWindow] = producerBatch{seq: st.Sequence, base: base, count: count, digest: st.Digest}
}

// lastWritten is producer id's last sequence written, if it is remembered.
func (t *producerTable) lastWritten(id uint64) (uint64, bool) {
	e := t.byID[id]
	if e == nil {
		return 0, false
	}
	return e.Value.(*producerState).last, true
}

// len is the number of producers remembered.
func (t *producerTable) len() int { return t.lru.Len() }
