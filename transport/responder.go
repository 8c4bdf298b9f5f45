package transport

import (
	"context"
	"errors"
	"io"

	"github.com/getfelix/felix-go/wire"
)

// pending is one answer a stream owes, in request order.
type pending struct {
	done      chan struct{}
	err       error
	offset    uint64
	hasOffset bool

	// An ack for a publish...
	requestID uint64
	count     uint32
	mode      wire.AckMode
	// ...or a control reply, encoded when it was made (b set).
	b []byte
	// size is what this answer is charged on the stream's and the
	// connection's answer bounds until it is written.
	size int64
}

// complete records the outcome; it is called once, possibly on a shard's
// goroutine, and never blocks.
func (p *pending) complete(err error) { p.resolve(0, false, err) }

// resolve records a publish's outcome, with its offset on a durable stream.
func (p *pending) resolve(offset uint64, hasOffset bool, err error) {
	p.offset, p.hasOffset, p.err = offset, hasOffset, err
	close(p.done)
}

// appendTo appends the answer; redirect says whether a failed ack may name
// the shard's owner (the client negotiated FeatureRedirect).
func (p *pending) appendTo(b []byte, redirect bool) []byte {
	if p.b != nil {
		return append(b, p.b...)
	}
	var refused *wire.RefusedError
	if errors.As(p.err, &refused) {
		// A conditional or idempotent publish the broker did not write:
		// its answer is a PublishRefused message, in the publish's place
		// in order.
		b, _ = wire.AppendMessage(b, &wire.PublishRefused{RequestID: p.requestID, Reason: refused.Reason, Expected: refused.Expected, Tail: refused.Tail, Message: refused.Message})
		return b
	}
	if p.err != nil {
		return wire.AppendAck(b, &wire.Ack{RequestID: p.requestID, Count: p.count, Err: clientError(p.err, redirect)})
	}
	if p.mode == wire.AckPerMessage {
		for i := range p.count {
			b = wire.AppendAck(b, &wire.Ack{RequestID: p.requestID, Count: 1, Offset: p.offset + uint64(i), HasOffset: p.hasOffset})
		}
		return b
	}
	return wire.AppendAck(b, &wire.Ack{RequestID: p.requestID, Count: p.count, Offset: p.offset, HasOffset: p.hasOffset})
}

// responder writes a stream's answers in request order while the requests
// keep being read: acked publishes are pipelined, and answers that are
// ready go out in one write with the ones before them. Its queue is the
// publish window: when it is full the reader stops reading, and QUIC flow
// control slows the client. The bytes of control answers are bounded too
// (answerStreamMaxBytes for the stream, answerConnMaxBytes with the
// connection's other streams): the reader reserves an answer's room
// before it reads the request (reserve) and waits while there is none.
type responder struct {
	w        io.Writer
	fifo     chan *pending
	finished chan struct{}
	// owed and connOwed are the stream's and the connection's answer
	// bounds; reserved is the room taken for the request being served,
	// touched only by the reader.
	owed, connOwed *byteGate
	reserved       int64
	// redirect: the client negotiated FeatureRedirect, so its errors may
	// name the shard's owner (ErrorMsg.Owner, FlagPublishAckOwner).
	redirect bool
}

func newResponder(w io.Writer, window int, connOwed *byteGate, redirect bool) *responder {
	r := &responder{
		w: w, fifo: make(chan *pending, max(0, window)), finished: make(chan struct{}),
		owed: newByteGate(answerStreamMaxBytes), connOwed: connOwed, redirect: redirect,
	}
	go r.run()
	return r
}

// reserve takes room for the answer of the request about to be served,
// waiting (the stream then reads nothing) until the stream and the
// connection have it or ctx ends.
func (r *responder) reserve(ctx context.Context, n int64) error {
	if err := r.owed.acquire(ctx, n); err != nil {
		return err
	}
	if err := r.connOwed.acquire(ctx, n); err != nil {
		r.owed.release(n)
		return err
	}
	r.reserved = n
	return nil
}

// unreserve gives back room reserved and not used by an answer.
func (r *responder) unreserve() {
	r.charge(0)
}

// charge turns the reservation into an answer of size bytes: the
// difference is given back, or charged past the bound (the answer exists
// already; holding it elsewhere would not make it smaller).
func (r *responder) charge(size int64) {
	if d := size - r.reserved; d != 0 {
		r.owed.add(d)
		r.connOwed.add(d)
	}
	r.reserved = 0
}

// release gives back a written answer's bytes.
func (r *responder) release(size int64) {
	if size != 0 {
		r.owed.release(size)
		r.connOwed.release(size)
	}
}

// ack queues an ack to be completed later.
func (r *responder) ack(requestID uint64, count uint32, mode wire.AckMode) *pending {
	p := &pending{done: make(chan struct{}), requestID: requestID, count: count, mode: mode}
	r.fifo <- p
	return p
}

// reply queues a control message that is ready now. It is encoded at once,
// so what it referred to (a page's records) is not kept besides its bytes.
func (r *responder) reply(m wire.Message) {
	b, err := wire.AppendMessage(nil, m)
	if err != nil {
		b, _ = wire.AppendMessage(nil, &wire.ErrorMsg{Code: wire.CodeInternal, Message: "encode answer: " + err.Error()})
	}
	p := &pending{done: make(chan struct{}), b: b, size: int64(len(b))}
	r.charge(p.size)
	close(p.done)
	r.fifo <- p
}

// fail queues an error message that is ready now.
func (r *responder) fail(requestID uint64, e *wire.Error) {
	r.reply(errorMsg(requestID, clientError(e, r.redirect)))
}

// close stops taking answers and waits until the owed ones are written.
func (r *responder) close() {
	r.unreserve()
	close(r.fifo)
	<-r.finished
}

// run writes answers until close. After a write error it keeps draining, so
// the reader never blocks on a stream nobody reads, but writes nothing.
// Small ready answers are gathered into one write of about flushBytes; a
// larger one goes out on its own, so nothing is copied into an ever
// larger buffer (300 unread pages were concatenated into one).
func (r *responder) run() {
	defer close(r.finished)
	var buf []byte
	var held int64 // the charged bytes of what is in buf
	broken := false
	write := func(b []byte) {
		if len(b) > 0 && !broken {
			if _, err := r.w.Write(b); err != nil {
				broken = true
			}
		}
	}
	flush := func() {
		write(buf)
		buf = buf[:0]
		r.release(held)
		held = 0
	}
	add := func(p *pending) {
		if len(p.b) >= flushBytes {
			flush()
			write(p.b)
			r.release(p.size)
			return
		}
		buf = p.appendTo(buf, r.redirect)
		held += p.size
		if len(buf) >= flushBytes {
			flush()
		}
	}
	var next *pending
	for {
		if next == nil {
			p, ok := <-r.fifo
			if !ok {
				flush()
				return
			}
			next = p
		}
		select {
		case <-next.done:
		default:
			flush() // send what is ready before waiting on the slow one
			<-next.done
		}
		add(next)
		next = nil
		select {
		case p, ok := <-r.fifo:
			if !ok {
				flush()
				return
			}
			next = p
		default:
			flush()
		}
	}
}
