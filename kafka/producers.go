package kafka

import (
	"errors"
	"math"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/getfelix/felix-go/wire"
)

// Idempotent producers. A Kafka producer id is a Felix idempotent producer
// id (service.Session.InitProducer); its epoch is always 0. The sequences
// differ: Kafka's base sequence counts records (a batch of n records after
// sequence s starts at s+n), Felix's counts batches (the next is last+1).
// The listener maps one onto the other per (producer, stream, shard):
// producerSeqs remembers the next Kafka sequence, the Felix sequence it
// becomes, and the last few batches, so a retry (same Kafka base sequence)
// gets its original Felix sequence and the shard answers it as the
// duplicate it is, with its original offset and nothing written.
//
// The map is a cache, not state: after a restart, or an eviction, or an
// error, the first batch of the pair re-learns the shard's position by
// probing (conn.probe): a publish with sequence MaxUint64, which the shard
// refuses without writing and answers with the sequence it expects next
// (sequence_gap, or unknown_producer for none). Whether the batch is a
// retry of one of the last five written is then asked of the shard with
// each of their sequences, newest first: the same content is a duplicate,
// other content is sequence_reused; when none matches the batch is new.

// producerWindow is how many batches per pair a retry may go back: Kafka
// producers keep at most 5 in flight per partition.
const producerWindow = 5

// defaultMaxProducers bounds the map; an evicted pair probes again.
const defaultMaxProducers = 16384

type producerKey struct {
	id    uint64
	scope wire.Scope
	shard uint32
}

type sentBatch struct {
	kafka int32
	felix uint64
	set   bool
}

type producerSeqs struct {
	nextKafka int32
	nextFelix uint64
	recent    [producerWindow]sentBatch
}

// producerMap is shared by the listener's connections: a producer may
// reconnect, and its batches then arrive on another connection.
type producerMap struct {
	max int
	mu  struct {
		sync.Mutex
		m map[producerKey]*producerSeqs
	}
}

func newProducerMap(max int) *producerMap {
	pm := &producerMap{max: max}
	pm.mu.m = make(map[producerKey]*producerSeqs)
	return pm
}

// errSequence is a Kafka sequence that is neither the next nor a recent
// one: OUT_OF_ORDER_SEQUENCE_NUMBER.
var errSequence = errors.New("kafka: out of order sequence number")

// assign returns the Felix sequence of a batch of n records at Kafka base
// sequence seq, and false when the pair is unknown (probe first).
func (pm *producerMap) assign(k producerKey, seq, n int32) (uint64, bool, error) {
	pm.mu.Lock()
	defer pm.mu.Unlock()
	ps := pm.mu.m[k]
	if ps == nil {
		return 0, false, nil
	}
	if seq == ps.nextKafka {
		felix := ps.nextFelix
		ps.recent[felix%producerWindow] = sentBatch{kafka: seq, felix: felix, set: true}
		ps.nextKafka = addSeq(seq, n)
		ps.nextFelix++
		return felix, true, nil
	}
	for _, b := range ps.recent {
		if b.set && b.kafka == seq {
			return b.felix, true, nil
		}
	}
	return 0, true, errSequence
}

// learn starts a pair whose shard expects Felix sequence felix next, and
// Kafka sequence kafka next.
func (pm *producerMap) learn(k producerKey, kafka int32, felix uint64, last *sentBatch) {
	pm.mu.Lock()
	defer pm.mu.Unlock()
	if len(pm.mu.m) >= pm.max {
		for old := range pm.mu.m {
			delete(pm.mu.m, old) // any one: it probes again when used
			break
		}
	}
	ps := &producerSeqs{nextKafka: kafka, nextFelix: felix}
	if last != nil {
		ps.recent[last.felix%producerWindow] = *last
	}
	pm.mu.m[k] = ps
}

// forget drops a pair after an error, so its next batch probes.
func (pm *producerMap) forget(k producerKey) {
	pm.mu.Lock()
	delete(pm.mu.m, k)
	pm.mu.Unlock()
}

// addSeq is Kafka's sequence arithmetic: it wraps from MaxInt32 to 0.
func addSeq(seq, n int32) int32 {
	if int64(seq)+int64(n) > math.MaxInt32 {
		return int32(int64(seq) + int64(n) - math.MaxInt32 - 1)
	}
	return seq + n
}

// handleInitProducerID gives a new producer id for every call (epoch 0).
// A transactional id is refused: Felix has no transactions.
func (c *conn) handleInitProducerID(h header, r *kmsg.InitProducerIDRequest) *pending {
	resp := r.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if r.TransactionalID != nil {
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
	} else if id, err := c.kafkaProducerID(); err != nil {
		resp.ErrorCode = errorCode(err)
	} else {
		resp.ProducerID, resp.ProducerEpoch = id, 0
	}
	c.count(h.key, resp.ErrorCode)
	return answered(h.correlation, resp)
}

// kafkaProducerID asks the service for producer ids until one fits
// Kafka's: Felix draws 64 random bits, Kafka's ids are non-negative
// int64s, and a batch with a negative id is not idempotent at all. Half
// the draws fit; the others stay unused in the broker's registry.
func (c *conn) kafkaProducerID() (int64, error) {
	for range 16 {
		id, err := c.sess.InitProducer(c.ctx)
		if err != nil {
			return 0, err
		}
		if id <= math.MaxInt64 {
			return int64(id), nil
		}
	}
	return 0, errors.New("kafka: 16 producer ids in a row did not fit Kafka's int64")
}
