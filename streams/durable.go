package streams

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/getfelix/felix-go/actors"
)

// Log is what a durable shard needs from its log; the broker adapts
// persistence.Log to it, so streams does not depend on the storage package.
type Log interface {
	// Append writes records at base, which must be the log's next offset.
	Append(base uint64, records [][]byte, now time.Time) error
	// WaitDurable answers once everything below upTo is on the device.
	WaitDurable(upTo uint64) <-chan error
	// NextOffset is the offset the next record gets.
	NextOffset() uint64
	// EnforceRetention deletes whole segments past the retention bounds.
	EnforceRetention(now time.Time) error
	// Read returns up to maxRecords (and about maxBytes) records from
	// offset from; it never waits. Safe from any goroutine.
	Read(from uint64, maxRecords, maxBytes int) (ReadPage, error)
	// StartOffset is the oldest record retention kept.
	StartOffset() uint64
	// Committed is the end of what readers may see: under on_commit what
	// is on the device, otherwise what is written.
	Committed() uint64
	Close() error
}

// Record is one record read back from a durable shard.
type Record struct {
	Offset uint64
	Time   time.Time
	Value  []byte
}

// ReadPage is one page of records and the offset to read next.
type ReadPage struct {
	Records []Record
	Next    uint64
}

// defaultRetentionInterval is how often a durable shard enforces retention
// when ShardConfig.RetentionInterval is zero. Whole segments go at once, so
// checking more often buys little.
const defaultRetentionInterval = 10 * time.Second

// durableWait is a batch appended under on_commit, waiting for its fsync.
type durableWait struct {
	upTo uint64
	env  *Envelope
	p    *Publish
}

// durableDone tells the shard a batch's fsync finished (err nil) or failed.
type durableDone struct {
	actors.ControlMessage
	env *Envelope
	p   *Publish
	err error
}

// enforceRetention is the shard's retention tick.
type enforceRetention struct{ actors.ControlMessage }

func (s *shard) handleStarted(ctx actor.Context) {
	if s.log == nil || s.retentionTimer != nil {
		return // in memory, or a restart: the waiter and timer still run
	}
	self := ctx.Self()
	if s.waits != nil {
		// One goroutine per on_commit shard waits on fsyncs in append order
		// and hands each batch back to the actor. It exits when the shard
		// stops and closes waits.
		go func() {
			for w := range s.waits {
				err := <-s.log.WaitDurable(w.upTo)
				if s.stopped.Load() {
					// Nobody will handle a durableDone: answer here.
					if w.p.Done != nil {
						w.p.Done(0, false, ErrShardStopped)
					}
					continue
				}
				s.root.Send(self, &durableDone{env: w.env, p: w.p, err: err})
			}
		}()
	}
	every := s.cfg.RetentionInterval
	if every <= 0 {
		every = defaultRetentionInterval
	}
	var tick func()
	tick = func() {
		s.root.Send(self, &enforceRetention{})
		s.retentionTimer.Reset(every)
	}
	s.retentionTimer = time.AfterFunc(every, tick)
}

func (s *shard) handleEnforceRetention() {
	if s.log == nil {
		return
	}
	if err := s.log.EnforceRetention(time.Now()); err != nil {
		s.logger.Warn().Err(err).Msg("retention")
	}
}

// handleStopped closes the log. Batches still waiting for their fsync are
// answered by the waiter goroutine (stopped is set, so it answers them
// itself); durableDone messages already queued are failed by the mailbox's
// drop hook when it closes.
func (s *shard) handleStopped() {
	if s.log == nil {
		return
	}
	s.stopped.Store(true)
	if s.retentionTimer != nil {
		s.retentionTimer.Stop()
	}
	if s.waits != nil {
		close(s.waits)
	}
	if err := s.log.Close(); err != nil {
		s.logger.Warn().Err(err).Msg("close durable log")
	}
}
