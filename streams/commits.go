package streams

import "github.com/getfelix/felix-go/actors"

// Commit watches. Whoever waits for a durable shard's next records (a Kafka
// Fetch's long poll, a consumer group's parked polls) registers a waker
// with the shard, and the shard wakes it every time its committed end (what
// Log.Committed gives readers) moves: a publish delivered here (written, or
// synced under on_commit), and on a replicated shard every applied entry,
// on the leader and on the followers alike, a new leader's applies of its
// predecessor's entries included. publishBatch is the one step every one of
// those paths goes through, so the shard is the event's only source.
// Wrapping the publisher's acknowledgement (tried first) saw only the
// first path; reading again on a timer saw the rest late.

// maxCommitWatchers bounds the watchers of one shard: each is a waiting
// Fetch (itself bounded per connection by kafka_max_inflight) or a group
// actor with parked polls, so this only keeps one advance from walking an
// unbounded list. A registration past it is dropped: that watcher is never
// woken, and waits out its own deadline.
const maxCommitWatchers = 1024

// CommitWaker is told that a shard's committed end moved. Wake runs on the
// shard's goroutine and must not block; it returns false once the watcher
// is gone, and the shard forgets it. A waker is compared by identity:
// register a pointer.
type CommitWaker interface {
	Wake() bool
}

// WakeChan wakes a goroutine: a send on C that never blocks (give C room
// for one; a full C is already woken). It is gone once Gone is closed.
type WakeChan struct {
	C    chan<- struct{}
	Gone <-chan struct{}
}

// Wake implements CommitWaker.
func (w *WakeChan) Wake() bool {
	select {
	case <-w.Gone:
		return false
	default:
	}
	select {
	case w.C <- struct{}{}:
	default: // already woken, not yet read again
	}
	return true
}

// WatchCommitted registers Waker with the shard. It is woken at once when
// the committed end is already past After (what the watcher last read), and
// then at every advance, until UnwatchCommitted, until Wake reports it
// gone, or until the shard stops (which wakes it a last time: what it
// waits for may now come from the shard's successor).
type WatchCommitted struct {
	actors.ControlMessage
	Waker CommitWaker
	After uint64
}

// UnwatchCommitted forgets Waker.
type UnwatchCommitted struct {
	actors.ControlMessage
	Waker CommitWaker
}

func (s *shard) handleWatchCommitted(msg *WatchCommitted) {
	if len(s.watchers) >= maxCommitWatchers {
		s.logger.Debug().Int("watchers", len(s.watchers)).Msg("commit watch refused: the shard has too many")
		return
	}
	if s.committed() > msg.After && !msg.Waker.Wake() {
		return
	}
	s.watchers = append(s.watchers, msg.Waker)
}

func (s *shard) handleUnwatchCommitted(msg *UnwatchCommitted) {
	for i, w := range s.watchers {
		if w == msg.Waker {
			s.watchers[i] = s.watchers[len(s.watchers)-1]
			s.watchers[len(s.watchers)-1] = nil
			s.watchers = s.watchers[:len(s.watchers)-1]
			return
		}
	}
}

// committed is the end readers see: the log's, once open (a replicated
// log's is what was applied), else what was delivered.
func (s *shard) committed() uint64 {
	if s.log != nil {
		return s.log.Committed()
	}
	return s.delivered
}

// wakeWatchers tells every watcher the committed end moved, and forgets
// those that are gone. Order among watchers does not matter.
func (s *shard) wakeWatchers() {
	alive := s.watchers[:0]
	for _, w := range s.watchers {
		if w.Wake() {
			alive = append(alive, w)
		}
	}
	clear(s.watchers[len(alive):])
	s.watchers = alive
}
