package streams

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/wire"
)

// Log is what a durable shard needs from its log; the broker adapts
// persistence.Log to it, so streams does not depend on the storage package.
type Log interface {
	// Append writes records at base, which must be the log's next offset.
	Append(base uint64, records [][]byte, now time.Time) error
	// AppendStamped is Append for an idempotent producer's batch: the
	// stamp is written with it, in the same batch, so Stamps gives it back.
	AppendStamped(base uint64, records [][]byte, now time.Time, stamp Stamp) error
	// Stamps calls fn with every stamped batch from offset from (between
	// StartOffset and NextOffset) to the end, oldest first, until fn returns
	// false. It reads batch headers, one batch at a time.
	Stamps(from uint64, fn func(s Stamp, base uint64, count uint32) bool) error
	// WaitDurable answers once everything below upTo is on the device.
	WaitDurable(upTo uint64) <-chan error
	// NextOffset is the offset the next record gets.
	NextOffset() uint64
	// EnforceRetention deletes whole segments past the retention bounds.
	EnforceRetention(now time.Time) error
	// Read returns up to maxRecords (and about maxBytes) records from
	// offset from; it never waits. Safe from any goroutine.
	Read(from uint64, maxRecords, maxBytes int) (ReadPage, error)
	// OffsetForTime returns the offset of the first record appended at or
	// after t: StartOffset when t is before every record kept, NextOffset
	// when every record is older. It never waits. Safe from any goroutine.
	OffsetForTime(t time.Time) (uint64, error)
	// StartOffset is the oldest record retention kept.
	StartOffset() uint64
	// Committed is the end of what readers may see: under on_commit what
	// is on the device, otherwise what is written.
	Committed() uint64
	// Failed is the error after which the log takes no more appends
	// (persistence's poisoning: a failed write or fsync), or nil. The shard
	// then answers storage and stops, closing the log; the next request
	// makes a new shard, which opens the log again and recovers from what
	// is on the device, so freeing disk space is enough.
	Failed() error
	Close() error
}

// Record is one record read back from a durable shard.
type Record struct {
	Offset uint64
	Time   time.Time
	Value  []byte
	Attrs  []byte // an AttrsLog's record attributes, or nil
}

// AttrsLog is a Log that also keeps each record's attributes (a key and
// headers, opaque here): Publish.Attrs are written with AppendWithAttrs
// and come back in Record.Attrs. stamp may be nil.
type AttrsLog interface {
	AppendWithAttrs(base uint64, records, attrs [][]byte, now time.Time, stamp *Stamp) error
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
	pe   *pending
	// dup, for a re-send of a batch still waiting for its fsync, is the
	// answer to give once that fsync is done (env is nil).
	dup *PublishResult
}

// durableDone tells the shard a batch's fsync finished (err nil) or failed.
type durableDone struct {
	actors.ControlMessage
	durableWait
	err error
}

// enforceRetention is the shard's retention tick.
type enforceRetention struct{ actors.ControlMessage }

// openLog opens the log, starts the waiter (on_commit) and the retention
// ticker, and tells readers through the ShardRef.
func (s *shard) openLog(self *actor.PID) error {
	log, onCommit, err := s.open()
	if err != nil {
		// A log that will not open (corruption, an unwritable directory)
		// refuses the shard clearly; it is never silently emptied.
		err = wire.WrapError(wire.CodeStorage, err, "open the log of %s shard %d", s.scope, s.n)
		s.ref.opened(nil, err)
		return err
	}
	if s.openReplica != nil {
		if err := s.startReplica(log); err != nil {
			if cerr := log.Close(); cerr != nil {
				s.logger.Warn().Err(cerr).Msg("close durable log")
			}
			err = wire.WrapError(wire.CodeStorage, err, "start the replica of %s shard %d", s.scope, s.n)
			s.ref.opened(nil, err)
			return err
		}
		s.log = log
		s.ref.opened(log, nil)
		return nil
	}
	// The producer table is rebuilt from the stamps in the log: one pass
	// over the log's batch headers, before the shard takes any publish.
	// Retention is not running yet, so nothing moves under the walk.
	producers := newProducerTable(s.cfg.maxProducers)
	if err := log.Stamps(log.StartOffset(), func(st Stamp, base uint64, count uint32) bool {
		producers.record(st, base, count)
		return true
	}); err != nil {
		if cerr := log.Close(); cerr != nil {
			s.logger.Warn().Err(cerr).Msg("close durable log")
		}
		err = wire.WrapError(wire.CodeStorage, err, "rebuild the producers of %s shard %d from its log", s.scope, s.n)
		s.ref.opened(nil, err)
		return err
	}
	if err := s.rebuildCache(log, log.NextOffset()); err != nil {
		if cerr := log.Close(); cerr != nil {
			s.logger.Warn().Err(cerr).Msg("close durable log")
		}
		err = wire.WrapError(wire.CodeStorage, err, "rebuild the cache index of %s shard %d from its log", s.scope, s.n)
		s.ref.opened(nil, err)
		return err
	}
	s.producers = producers
	s.log = log
	s.next = log.NextOffset()
	s.delivered = s.next
	send := func(msg any) { s.root.Send(self, msg) }
	if onCommit {
		s.waiter = startSyncWaiter(log, max(1, s.waitDepth), send)
	}
	every := s.cfg.RetentionInterval
	if every <= 0 {
		every = defaultRetentionInterval
	}
	s.retention = startRetentionTicker(every, func() { send(&enforceRetention{}) })
	s.ref.opened(log, nil)
	return nil
}

func (s *shard) handleEnforceRetention() {
	if s.log == nil {
		return
	}
	if err := s.log.EnforceRetention(time.Now()); err != nil {
		s.logger.Warn().Err(err).Msg("retention")
	}
}

// handleStopped stops the waiter and the ticker first (nothing they do
// happens after), then fails every publish in flight and closes the log.
// Publishes still queued are failed by the mailbox's drop hook when it
// closes, right after this; queued durableDones are already answered here.
func (s *shard) handleStopped() {
	s.retention.Stop()
	s.idle.Stop()
	if s.cache != nil {
		s.cache.tick.Stop()
	}
	s.stopCacheCompaction()
	s.waiter.Stop()
	s.stopReplica()
	s.ledger.failAll(errStoppedInFlight)
	// Whatever the watchers wait for comes from this shard's successor now.
	s.wakeWatchers()
	s.watchers = nil
	s.ref.opened(nil, ErrShardStopped) // if it never opened
	if s.log == nil {
		return
	}
	if err := s.log.Close(); err != nil {
		s.logger.Warn().Err(err).Msg("close durable log")
	}
	if s.repl != nil && s.repl.removed && s.cfg.RemoveShardData != nil {
		s.cfg.RemoveShardData(s.scope, s.n)
	}
}

// worker is a goroutine with a Stop that returns only after the goroutine
// exited, so nothing it does happens after Stop.
type worker struct {
	quit chan struct{}
	done chan struct{}
}

func startWorker(run func(quit <-chan struct{})) worker {
	w := worker{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		run(w.quit)
	}()
	return w
}

func (w worker) stop() {
	close(w.quit)
	<-w.done
}

// syncWaiter waits for fsyncs in append order, one batch at a time, and
// hands each batch back to the shard with send. One per on_commit shard.
type syncWaiter struct {
	worker
	waits chan durableWait
}

func startSyncWaiter(log Log, depth int, send func(msg any)) *syncWaiter {
	w := &syncWaiter{waits: make(chan durableWait, depth)}
	w.worker = startWorker(func(quit <-chan struct{}) {
		for {
			var d durableWait
			select {
			case d = <-w.waits:
			case <-quit:
				return
			}
			// A stop does not wait for the fsync: the shard fails what
			// is still waiting itself (ledger.failAll).
			select {
			case err := <-log.WaitDurable(d.upTo):
				send(&durableDone{durableWait: d, err: err})
			case <-quit:
				return
			}
		}
	})
	return w
}

// wait queues a batch; it blocks while depth batches wait (backpressure).
func (w *syncWaiter) wait(d durableWait) {
	select {
	case w.waits <- d:
	case <-w.quit:
	}
}

// Stop ends the waiter; after it returns, nothing more is sent. Nil-safe.
func (w *syncWaiter) Stop() {
	if w != nil {
		w.stop()
	}
}

// retentionTicker calls fire every interval until stopped. It replaced a
// self-re-arming time.AfterFunc, whose Reset could re-arm the timer after
// the shard had stopped it.
type retentionTicker struct{ worker }

func startRetentionTicker(every time.Duration, fire func()) *retentionTicker {
	return &retentionTicker{startWorker(func(quit <-chan struct{}) {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				fire()
			case <-quit:
				return
			}
		}
	})}
}

// Stop ends the ticker; after it returns, fire is not called. Nil-safe.
func (t *retentionTicker) Stop() {
	if t != nil {
		t.stop()
	}
}
