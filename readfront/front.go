// Package readfront is a connection's reads of durable shards, on the
// client's goroutine: the range read (service.Session's Read), the time
// lookup (OffsetForTime) and the commit watch a long poll waits on
// (service.CommitWatcher). Each checks stream.subscribe and finds the
// shard, never creating a stream (an unknown one is not_found, an
// in-memory one invalid_request). A read or lookup has a replicated shard
// confirm it (Conn.ConfirmRead), then reads the shard's log directly,
// registering nothing with the shard; a page is bounded in records and
// bytes whatever the client asks. It decodes the log's record attributes
// into the service's records; a publish's are encoded by the broker, which
// writes them.
package readfront

import (
	"context"
	"sync"
	"time"

	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/persistence"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/wire"
)

// Conn is what a connection lends its reads: its principal's check and
// its lookups, so a read is checked and resolved as every other call of
// that connection is.
type Conn interface {
	// Authorize checks the connection's principal for action on scope.
	Authorize(action auth.Action, scope wire.Scope) error
	// Registry asks the streams registry msg and returns its definition.
	Registry(ctx context.Context, msg any) (streams.Def, error)
	// Shard returns shard n of scope as served here.
	Shard(ctx context.Context, scope wire.Scope, n uint32) (*streams.ShardRef, error)
	// ConfirmRead has a replicated shard confirm a read that starts now
	// (streams.ConfirmRead); any other shard answers at once.
	ConfirmRead(ctx context.Context, ref *streams.ShardRef, followerLag time.Duration) (*streams.ReadConfirmed, error)
}

// Session is one connection's reads of service.Session; the broker's
// connection embeds it.
type Session struct {
	c Conn
}

// New returns c's reads.
func New(c Conn) Session { return Session{c: c} }

// Range-read bounds: at most this many records and about this many bytes
// per page, whatever the client asks, so one read cannot make the broker
// hold an unbounded answer.
const (
	maxReadRecords = 10000
	maxReadBytes   = 4 << 20
)

// maxTimeScanRecords bounds the records a time lookup reads past the log's
// answer, so one lookup costs at most a few pages.
const maxTimeScanRecords = 4 * maxReadRecords

// Read implements service.Session: one page of committed records of a
// durable shard, once a replicated shard confirmed the read.
func (s Session) Read(ctx context.Context, req *service.Read) (*service.Records, error) {
	if req.FollowerMaxLag < 0 || req.FollowerMaxLag > wire.MaxFollowerLagMS*time.Millisecond {
		return nil, wire.NewError(wire.CodeInvalidRequest, "a follower read's lag is at most %d ms", wire.MaxFollowerLagMS)
	}
	ref, log, err := s.durableLog(ctx, req.Scope, req.Shard, "range reads")
	if err != nil {
		return nil, err
	}
	confirmed, err := s.c.ConfirmRead(ctx, ref, req.FollowerMaxLag)
	if err != nil {
		return nil, err
	}
	out, err := readPage(log, req)
	if err != nil {
		return nil, err
	}
	out.Follower = confirmed.Follower
	return out, nil
}

// readPage reads req's page from log, within its committed end and what
// retention kept, bounded by maxReadRecords and maxReadBytes.
func readPage(log streams.Log, req *service.Read) (*service.Records, error) {
	committed, start := log.Committed(), log.StartOffset()
	switch {
	case req.From > committed:
		return nil, wire.NewError(wire.CodeInvalidRequest, "in_future: offset %d is past the committed end %d of %s shard %d", req.From, committed, req.Scope, req.Shard)
	case req.From < start:
		return nil, wire.NewError(wire.CodeNotFound, "too_old: offset %d is below what retention kept; the oldest is %d", req.From, start)
	}
	end := committed
	if req.End != nil && *req.End < end {
		end = *req.End
	}
	out := &service.Records{Next: req.From, Committed: committed, Start: start}
	if req.From >= end {
		return out, nil
	}
	maxRecords := int(min(uint64(maxReadRecords), end-req.From))
	if req.MaxRecords > 0 {
		maxRecords = min(maxRecords, req.MaxRecords)
	}
	maxBytes := maxReadBytes
	if req.MaxBytes > 0 {
		maxBytes = min(maxBytes, req.MaxBytes)
	}
	page, err := log.Read(req.From, maxRecords, maxBytes)
	if err != nil {
		return nil, wire.WrapError(wire.CodeStorage, err, "read %s shard %d at %d", req.Scope, req.Shard, req.From)
	}
	out.Records = make([]service.Record, len(page.Records))
	for i, r := range page.Records {
		out.Records[i] = service.Record{Offset: r.Offset, Time: r.Time, Value: r.Value}
		if err := withAttrs(&out.Records[i], r.Attrs); err != nil {
			return nil, err
		}
	}
	out.Next = page.Next
	return out, nil
}

// OffsetForTime implements service.Session: where a durable shard's
// committed records reach time t, once a replicated shard confirmed the
// read.
func (s Session) OffsetForTime(ctx context.Context, scope wire.Scope, shard uint32, t time.Time) (uint64, error) {
	ref, log, err := s.durableLog(ctx, scope, shard, "time lookups")
	if err != nil {
		return 0, err
	}
	if _, err := s.c.ConfirmRead(ctx, ref, 0); err != nil {
		return 0, err
	}
	off, err := offsetForTime(log, t)
	if err != nil {
		return 0, wire.WrapError(wire.CodeStorage, err, "find time %s in %s shard %d", t.UTC().Format(time.RFC3339Nano), scope, shard)
	}
	return off, nil
}

// offsetForTime is the first committed offset of log whose record is at or
// after t. Committed is read first: the lookup sees at least as far. An
// answer at or past it means every committed record is older than t
// (records in [committed, off) are older too, but not readable yet), so
// the answer is the committed end, which a read can start from.
func offsetForTime(log streams.Log, t time.Time) (uint64, error) {
	committed := log.Committed()
	off, err := log.OffsetForTime(t)
	if err == nil && off < committed {
		off, err = skipOlderRecords(log, off, committed, t)
	}
	return min(off, committed), err
}

// skipOlderRecords moves a time lookup from the log's answer to the first
// record whose stored time (its producer's, else its append time) is at or
// after t. The log indexes append times, which never decrease; a record
// that kept its producer's time can be older than its append time, so the
// first records appended at or after t can still be older than t, and are
// skipped, as Kafka's lookup skips them. A record whose producer's time is
// later than its append time is found from its append time: the log has
// no index of producers' times. It reads at most maxTimeScanRecords and
// answers where it stopped.
func skipOlderRecords(log streams.Log, from, committed uint64, t time.Time) (uint64, error) {
	for read := 0; from < committed && read < maxTimeScanRecords; {
		page, err := log.Read(from, int(min(uint64(maxReadRecords), committed-from)), maxReadBytes)
		if err != nil || len(page.Records) == 0 {
			return from, err
		}
		for _, r := range page.Records {
			at := r.Time
			if a, err := persistence.DecodeRecordAttrs(r.Attrs); err == nil && !a.Time.IsZero() {
				at = a.Time
			}
			if !at.Before(t) {
				return r.Offset, nil
			}
		}
		read += len(page.Records)
		from = page.Next
	}
	return from, nil
}

// durableLog authorizes a read of scope (stream.subscribe) and returns its
// shard and the shard's log. It never creates a stream: an unknown one is
// not_found, and an in-memory one is invalid_request, naming what needs a
// durable stream (what).
func (s Session) durableLog(ctx context.Context, scope wire.Scope, shard uint32, what string) (*streams.ShardRef, streams.Log, error) {
	if err := scope.Validate(); err != nil {
		return nil, nil, err
	}
	if err := s.c.Authorize(auth.ActionStreamSubscribe, scope); err != nil {
		return nil, nil, err
	}
	def, err := s.c.Registry(ctx, &streams.GetStream{Scope: scope})
	if err != nil {
		return nil, nil, err
	}
	if !def.Durable {
		return nil, nil, wire.NewError(wire.CodeInvalidRequest, "stream %s is in memory; %s need a durable stream (felix stream create --durable)", scope, what)
	}
	ref, err := s.c.Shard(ctx, scope, shard)
	if err != nil {
		return nil, nil, err
	}
	log, err := ref.Log(ctx)
	return ref, log, err
}

// WatchCommitted implements service.CommitWatcher: the watch is the shard's
// own (streams.WatchCommitted), so a reader is woken by every advance of
// the committed end, whatever made it: a publish here, or a raft apply on
// a replicated shard's leader or follower. It needs the same right as a
// range read of the shard, and the shard served here.
func (s Session) WatchCommitted(ctx context.Context, scope wire.Scope, shard uint32, after uint64, wake chan<- struct{}) (func(), error) {
	ref, _, err := s.durableLog(ctx, scope, shard, "commit watches")
	if err != nil {
		return nil, err
	}
	gone := make(chan struct{})
	w := &streams.WakeChan{C: wake, Gone: gone}
	unwatch := ref.WatchCommitted(w, after)
	var once sync.Once
	return func() {
		once.Do(func() {
			// Gone first: should the unwatch not arrive (the shard
			// stopped), the shard forgets the watch at its next advance.
			close(gone)
			unwatch()
		})
	}, nil
}

var _ service.CommitWatcher = Session{}

// withAttrs fills r's key and headers, and its own time when it has one,
// from the log's attribute bytes.
//
// NOTE: a codec is kept as its index in service.Codecs plus one, 0 for
// none: the broker's publish path encodes it so (codecID, broker/attrs.go).
func withAttrs(r *service.Record, attrs []byte) error {
	a, err := persistence.DecodeRecordAttrs(attrs)
	if err != nil {
		return wire.WrapError(wire.CodeStorage, err, "record %d's attributes", r.Offset)
	}
	hs := a.Headers
	r.Key = a.Key
	if !a.Time.IsZero() {
		r.Time = a.Time
	}
	if a.Codec > 0 && int(a.Codec) <= len(service.Codecs) {
		r.Codec = service.Codecs[a.Codec-1]
	}
	r.Batch = int(a.Batch)
	if len(hs) > 0 {
		r.Headers = make([]service.Header, len(hs))
		for i, h := range hs {
			r.Headers[i] = service.Header{Key: h.Key, Value: h.Value}
		}
	}
	return nil
}
