// Package transport owns Felix's network edge: the QUIC listener with TLS
// 1.3 and the felix/1 ALPN, the handshake, and one read loop per control
// stream that decodes frames and hands requests to the broker through the
// Backend interface. It knows nothing of actors, streams or storage.
package transport

import (
	"io"
	"net"

	"github.com/getfelix/felix-go/wire"
)

// Backend is what the transport needs from the broker. It is defined here,
// by its consumer, so the transport depends on nothing behind it.
type Backend interface {
	// Open starts a session for a connection that completed its handshake.
	Open(info ConnInfo) (Session, error)
}

// ConnInfo describes an authenticated connection.
type ConnInfo struct {
	ID       uint64
	Remote   net.Addr
	Tenant   string
	Flags    uint16
	Features uint32
}

// PublishDone is called once when a publish was handled: with the first
// record's offset when the stream is durable (hasOffset), or with the error.
type PublishDone func(offset uint64, hasOffset bool, err error)

// EventSink is the send half of a subscription's event stream.
type EventSink interface {
	io.Writer
	Close() error
}

// Session serves one connection. Its methods are called from several stream
// goroutines at once.
type Session interface {
	// Publish admits a publish, waiting at most the publish queue timeout.
	// On nil, done is called exactly once when the publish was handled; it
	// must not block. On error, done is never called.
	Publish(p *wire.Publish, done PublishDone) error
	// Subscribe registers a subscription. open is called once with the
	// subscription id to open its event stream (the transport writes
	// EventStreamHello first); the session owns the sink afterwards.
	// then, when not nil, runs on its own goroutine after Subscribed was
	// queued: a resumed subscription writes its history then, so Subscribed
	// reaches the client first.
	Subscribe(req *wire.Subscribe, open func(id uint64) (EventSink, error)) (res *wire.Subscribed, then func(), err error)
	// Unsubscribe ends a subscription of this connection.
	Unsubscribe(id uint64) error
	// Stream administration.
	CreateStream(req *wire.StreamCreate) (*wire.StreamInfo, error)
	GetStream(req *wire.StreamGet) (*wire.StreamInfo, error)
	ListStreams(req *wire.StreamList) (*wire.StreamInfos, error)
	DeleteStream(req *wire.StreamDelete) error
	// ReadStream returns one page of a durable shard's committed records.
	ReadStream(req *wire.StreamRead) (*wire.StreamRecords, error)
	// Close ends every subscription; the connection is gone.
	Close()
}
