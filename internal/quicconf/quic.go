// Package quicconf holds the QUIC and TLS settings the broker's transport
// and the Go client share: the quic-go config, TLS 1.3 with the felix/1
// ALPN, the broker's self-signed certificate, and WebTransport's
// short-lived one (ShortLived). It exists so that the
// client need not import transport, which is the broker's side of the wire.
package quicconf

import (
	"time"

	"github.com/quic-go/quic-go"
)

// QUICConfig returns the quic-go settings shared by broker and client.
//
// The receive windows are what keeps one frozen subscription from stalling
// its whole connection. Data a client has not read counts against both its
// stream's window and the connection's; if one stream's window can grow as
// large as the connection's, one subscription that stops reading blocks
// every other stream of the connection, control answers included (seen in
// TestSlowConsumerIsolation with quic-go's defaults). So the connection
// window starts large and a stream's stays a small fraction of it: 16
// frozen streams, not one, would be needed to fill it.
func QUICConfig() *quic.Config {
	return &quic.Config{
		MaxIdleTimeout:                 30 * time.Second,
		KeepAlivePeriod:                5 * time.Second,
		MaxIncomingStreams:             1024,
		MaxIncomingUniStreams:          16384,
		InitialStreamReceiveWindow:     512 << 10,
		MaxStreamReceiveWindow:         4 << 20,
		InitialConnectionReceiveWindow: 64 << 20,
		MaxConnectionReceiveWindow:     64 << 20,
		// Lets a reset event stream still deliver its EventStreamHello
		// (see transport.openEventStream): without it a stream reset before the
		// client read the hello vanished, and Subscribe waited forever.
		EnableStreamResetPartialDelivery: true,
	}
}

// ServerQUICConfig is QUICConfig as the broker listens with it, with the
// limits on what a client may open:
//
//   - No unidirectional streams: a client never opens one (event streams
//     go from broker to client), and each could buffer a stream window.
//   - maxClientStreams bidirectional streams at once. quic-go cannot raise
//     a limit after the handshake (MAX_STREAMS only replaces streams that
//     ended), so it is one fixed value: our client opens the control
//     stream, up to PublishShardStreams+1 publish streams and nothing
//     else; a stream costs the broker two goroutines and at most one
//     partly read frame (bounded per connection, and in time by
//     frame_read_timeout_ms).
//
// The receive windows stay as in QUICConfig: quic-go only grows a window
// by auto-tuning on fast reads (AllowConnectionWindowIncrease can refuse
// growth, never force it), so a small window before auth could not be
// opened to 64 MiB after it. Before auth the transport reads only the
// control stream, at most pre_auth_max_frame_bytes of it, and resets any
// other stream as it is opened, so no window fills meanwhile.
func ServerQUICConfig() *quic.Config {
	c := QUICConfig()
	c.MaxIncomingStreams = maxClientStreams
	c.MaxIncomingUniStreams = -1 // quic-go: negative allows none
	return c
}

// maxClientStreams is the broker's limit on a client's concurrent
// bidirectional streams: a quarter of quic-go's 1024 we used before, far
// above the handful our client opens.
const maxClientStreams = 256
