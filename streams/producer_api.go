package streams

import (
	"errors"
	"fmt"
)

// The idempotent producer's part of the shard API, declared here until the
// shard implements them.

// ProducerSeq is an idempotent producer's id and the batch's sequence on
// its shard.
type ProducerSeq struct{ ID, Seq uint64 }

// ErrProducer matches (errors.Is) every *ProducerError.
var ErrProducer = errors.New("streams: idempotent producer refused")

// ProducerError refuses an idempotent producer's batch; nothing of it was
// written. Reason is sequence_gap (Expected is the sequence the shard
// expects), unknown_producer, sequence_reused or sequence_expired.
type ProducerError struct {
	Reason   string
	Expected uint64
}

func (e *ProducerError) Error() string {
	if e.Reason == "sequence_gap" {
		return fmt.Sprintf("streams: idempotent producer refused: sequence_gap: expected sequence %d", e.Expected)
	}
	return "streams: idempotent producer refused: " + e.Reason
}

func (e *ProducerError) Unwrap() error { return ErrProducer }
