// Package webfront is the browser front end: WebSocket (RFC 6455), and
// WebTransport over HTTP/3 (webtransport-go) when Config.WebTransportAddr
// is set, in front of service.Service, beside felix/1 (package transport)
// and Kafka (package kafka). One conn serves either (a link moves its
// frames). Like them it only carries credentials: tenancy,
// grants, quotas and connection limits are checked behind the boundary,
// and a browser's subscription is an ordinary one, with its own bounded
// subscriber queue and its stream's overflow policy (a slow tab drops or
// is dropped as a slow felix/1 client is, and slows no one else).
//
// # Framing
//
// Every WebSocket message is binary and is one frame; its first byte says
// what follows.
//
//   - 0x01 control: one msgpack map. Client requests carry "op" and "id"
//     (a request id the client picks, echoed in the reply):
//     auth {tenant, token} (the first frame, within auth_timeout_ms),
//     subscribe {ns, stream, shard, start: "latest"|"earliest"|"offset", offset},
//     unsubscribe {sub}, publish {ns, stream, key (bin), payloads ([bin])},
//     read {ns, stream, shard, from, max}.
//     The broker answers each with {op: "reply", id, ...}: sub,
//     durable, start_offset and live_offset for subscribe; offset and
//     durable for publish (acked once the shard handled it, durable
//     under the stream's fsync policy); records [{offset, value,
//     time_ms}], next and committed for read; or error {code, name,
//     retry, message} with felix/1's codes (wire/errors.go). It sends
//     {op: "ended", sub, code} when a subscription ends: code 0 after an
//     unsubscribe, else a felix/1 stream code (0x10 the broker ended it,
//     0x11 the token expired).
//   - 0x02 events: u64 subscription id, u16 flags, then the felix/1 event
//     batch payload unchanged (big-endian): with flags&0x20, a u64 base
//     offset (event i is at base+i, durable streams only); u32 count;
//     per event a u32 length and its bytes.
//
// Unknown kinds, unknown ops, msgpack that claims more than it holds or
// nests deeper than 8, and integers that do not fit their field are
// invalid_request. A message over pre_auth_max_frame_bytes before the
// auth, or over max_frame_bytes after it, closes the connection with
// WebSocket status 1009; a refused origin or credential closes it with
// status 1008 and the reason as text, so a page can show it.
//
// # WebTransport
//
// The same frames, on streams: the page's first bidirectional stream is
// the control stream, each frame on it after a big-endian u32 length
// (ReadStreamFrame, AppendStreamFrame). Each subscription's events come on
// a unidirectional stream the broker opens for it: a u64 subscription id,
// then its events frames, each after a u32 length. An unsubscribed
// subscription's stream is finished before its ended frame is sent, so a
// client that waits for both has every event; one the broker ends is reset
// with the felix/1 stream code. A refusal answers the page's first frame,
// then closes the session with the WebSocket codes as session error codes
// (1008 with the reason, 1009 for a frame too large), after the page
// closed it or refuseGrace: closing resets the streams and what is still
// unsent on them. A QUIC connection is admitted (Config.Admit) once its
// handshake is done and carries one session; every stream the page opens
// besides the control stream is reset.
package webfront
