package streams

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/getfelix/felix-go/wire"
)

// FrameShape is one layout of an event batch on the wire. Subscribers that
// negotiated different flags need different bytes; each shape is encoded at
// most once per envelope.
type FrameShape uint8

const (
	// ShapePlain is the shared event batch with no offsets.
	ShapePlain FrameShape = iota
	// ShapeOffsets carries the batch's base offset (durable streams, for
	// subscribers that offered FlagEventBatchOffsets).
	ShapeOffsets
	numShapes
)

// Envelope is one published batch on its way to every subscriber of a shard.
// It is immutable once the shard sends it, shared by pointer, and encodes its
// wire frame lazily: the first feeder to ask pays the encode and every other
// feeder gets the same bytes. Encode-once is why fanout costs delivery work
// but no re-encoding.
type Envelope struct {
	// Payloads alias the publish frame that carried them; nobody may write them.
	Payloads [][]byte
	bytes    int64
	// Base is the offset of the first record; Durable says the offsets are
	// real log offsets (an in-memory stream's are not shown to clients).
	// Both are set by the shard before it sends the envelope.
	Base    uint64
	Durable bool
	// Attrs are the publish's record attributes, for the log only.
	Attrs [][]byte
	// Published is the publish's Received (unix ns), for the delivery
	// latency metric; 0 (records read back from a log) is not timed.
	Published int64
	// Appended is the batch's append time in its log, the time its
	// records keep under LogAppendTime; zero for an in-memory stream.
	Appended time.Time
	// Resume, on a cache watch's change (cachewatch.go), is the version
	// the watch resumes from once it has this change; zero on a
	// snapshot's, which moves no resume version.
	Resume uint64

	frames  [numShapes]frameCache
	encodes atomic.Int32
}

type frameCache struct {
	once  sync.Once
	bytes []byte
}

// NewEnvelope wraps a published batch.
func NewEnvelope(payloads [][]byte) *Envelope {
	e := &Envelope{Payloads: payloads}
	for _, p := range payloads {
		e.bytes += int64(len(p))
	}
	return e
}

// MailboxBytes counts the batch's payload bytes against a subscriber
// queue's byte bound. The same bytes count once in every queue holding the
// envelope, because each of those queues keeps them alive.
func (e *Envelope) MailboxBytes() int64 { return e.bytes }

// Len is the number of records in the batch.
func (e *Envelope) Len() int { return len(e.Payloads) }

// Frame returns the batch's wire frame in the given shape, encoding it on
// first use. The returned bytes are shared: callers must not modify them.
func (e *Envelope) Frame(shape FrameShape) []byte {
	c := &e.frames[shape]
	c.once.Do(func() {
		e.encodes.Add(1)
		totalEncodes.Add(1)
		if shape == ShapeOffsets {
			c.bytes = wire.AppendEventBatchOffsets(nil, e.Base, e.Payloads)
		} else {
			c.bytes = wire.AppendEventBatch(nil, e.Payloads)
		}
	})
	return c.bytes
}

// Encodes counts how many frames this envelope has encoded (at most one per shape).
func (e *Envelope) Encodes() int { return int(e.encodes.Load()) }

// totalEncodes counts every frame encoded by any envelope in the process.
// It is one atomic add per publish batch and shape, never per delivery, so
// it can stay on in production; tests use it to prove encode-once.
var totalEncodes atomic.Uint64

// TotalEncodes returns how many event frames this process has encoded.
func TotalEncodes() uint64 { return totalEncodes.Load() }
