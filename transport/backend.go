// Package transport owns Felix's network edge: the QUIC listener with TLS
// 1.3 and the felix/1 ALPN, the handshake, and one read loop per control
// stream that decodes frames, converts them to the broker's domain types and
// calls the protocol-neutral service.Service. It knows nothing of actors,
// streams or storage.
package transport

import "net"

// ConnInfo describes an authenticated connection.
type ConnInfo struct {
	ID     uint64
	Remote net.Addr
	Tenant string
	Token  string
	// CertSubject is the verified client certificate's subject common
	// name, when the broker requires client certificates.
	CertSubject string
	Flags       uint16
	Features    uint32
}
