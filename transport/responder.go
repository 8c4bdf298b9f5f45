package transport

import (
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
	// ...or a control reply (msg set).
	msg wire.Message
}

// complete records the outcome; it is called once, possibly on a shard's
// goroutine, and never blocks.
func (p *pending) complete(err error) { p.resolve(0, false, err) }

// resolve records a publish's outcome, with its offset on a durable stream.
func (p *pending) resolve(offset uint64, hasOffset bool, err error) {
	p.offset, p.hasOffset, p.err = offset, hasOffset, err
	close(p.done)
}

func (p *pending) appendTo(b []byte) []byte {
	if p.msg != nil {
		b, _ = wire.AppendMessage(b, p.msg)
		return b
	}
	if p.err != nil {
		return wire.AppendAck(b, &wire.Ack{RequestID: p.requestID, Count: p.count, Err: wire.AsError(p.err)})
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
// keep being read: acked publishes are pipelined, and an answer that is
// ready goes out in the same write as the ones before it. Its queue is the
// publish window: when it is full the reader stops reading, and QUIC flow
// control slows the client.
type responder struct {
	w        io.Writer
	fifo     chan *pending
	finished chan struct{}
}

func newResponder(w io.Writer, window int) *responder {
	r := &responder{w: w, fifo: make(chan *pending, max(0, window)), finished: make(chan struct{})}
	go r.run()
	return r
}

// ack queues an ack to be completed later.
func (r *responder) ack(requestID uint64, count uint32, mode wire.AckMode) *pending {
	p := &pending{done: make(chan struct{}), requestID: requestID, count: count, mode: mode}
	r.fifo <- p
	return p
}

// reply queues a control message that is ready now.
func (r *responder) reply(m wire.Message) {
	p := &pending{done: make(chan struct{}), msg: m}
	close(p.done)
	r.fifo <- p
}

// fail queues an error message that is ready now.
func (r *responder) fail(requestID uint64, e *wire.Error) {
	r.reply(&wire.ErrorMsg{RequestID: requestID, Code: e.Code, Retry: e.Retry, Message: e.Message})
}

// close stops taking answers and waits until the owed ones are written.
func (r *responder) close() {
	close(r.fifo)
	<-r.finished
}

// run writes answers until close. After a write error it keeps draining, so
// the reader never blocks on a stream nobody reads, but writes nothing.
func (r *responder) run() {
	defer close(r.finished)
	var buf []byte
	broken := false
	flush := func() {
		if len(buf) > 0 && !broken {
			if _, err := r.w.Write(buf); err != nil {
				broken = true
			}
		}
		buf = buf[:0]
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
		buf = next.appendTo(buf)
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
