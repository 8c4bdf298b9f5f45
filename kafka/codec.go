package kafka

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Framing. A request is `int32 size` then a header (api_key int16,
// api_version int16, correlation_id int32, client_id as a non-compact
// nullable string even for flexible versions, then, for flexible versions
// only, a tagged-field section) and the body. A response is `int32 size`,
// `int32 correlation_id`, one tag byte for flexible responses except
// ApiVersions (always response header v0), then the body.

// Errors the frame and header decoder returns. Every one closes the
// connection: the stream has no way to resynchronise after a bad frame.
var (
	// ErrFrameTooLarge is a size prefix above the listener's
	// MaxRequestBytes, or negative; nothing of the body is read.
	ErrFrameTooLarge = errors.New("kafka: request larger than max_request_bytes")
	// ErrMalformed is a header or body that does not parse.
	ErrMalformed = errors.New("kafka: malformed request")
	// ErrUnknownAPI is an api key this listener does not serve (Kafka
	// closes the connection too).
	ErrUnknownAPI = errors.New("kafka: unsupported api key")
	// ErrUnsupportedVersion is a version outside the advertised range of an
	// api other than ApiVersions.
	ErrUnsupportedVersion = errors.New("kafka: unsupported api version")
)

// apiRange is one advertised api and its version range.
type apiRange struct{ min, max int16 }

// apis is what ApiVersions advertises, and the only requests served. The
// ranges are those verified against kgo v1.22.3, sarama v1.61.1 and
// librdkafka 2.0: Fetch and
// Produce stop before v13, where topics are named by id, which Felix does
// not have.
// NOTE: when adding an api, add its handler to conn.dispatch.
var apis = map[int16]apiRange{
	0:  {0, 9},  // Produce: v0-v2 (old message sets, legacy.go) for librdkafka's codec check
	1:  {4, 12}, // Fetch
	2:  {1, 6},  // ListOffsets
	3:  {1, 12}, // Metadata
	8:  {2, 8},  // OffsetCommit
	9:  {1, 7},  // OffsetFetch: v8 batches groups, which no client needs here
	10: {0, 4},  // FindCoordinator
	11: {0, 9},  // JoinGroup
	12: {0, 4},  // Heartbeat
	13: {0, 5},  // LeaveGroup
	14: {0, 5},  // SyncGroup
	15: {0, 5},  // DescribeGroups (admin: groupadmin.go, topicadmin.go, topicconfigs.go, cluster.go)
	16: {0, 5},  // ListGroups
	17: {0, 1},  // SASLHandshake: librdkafka wants v0 advertised; after a v0 handshake the token comes as a raw frame
	18: {0, 3},  // ApiVersions
	19: {0, 7},  // CreateTopics
	20: {0, 6},  // DeleteTopics: v6 may name a topic by id, which is UNKNOWN_TOPIC_ID
	22: {0, 4},  // InitProducerID
	32: {0, 4},  // DescribeConfigs
	33: {0, 2},  // AlterConfigs
	36: {0, 2},  // SASLAuthenticate
	37: {0, 3},  // CreatePartitions: always INVALID_PARTITIONS, shards cannot grow
	42: {0, 2},  // DeleteGroups
	44: {0, 1},  // IncrementalAlterConfigs
	47: {0, 0},  // OffsetDelete
	60: {0, 1},  // DescribeCluster
}

const apiVersionsKey = 18

// header is a request's header.
type header struct {
	key, version int16
	correlation  int32
	clientID     string // for DescribeGroups; "" when null
}

// frameStep is the first allocation for a frame's body, and its growth
// thereafter doubles: a client that announces a large request and sends
// little of it makes the broker hold little, not what it announced.
const frameStep = 64 << 10

// readBody reads a frame's n bytes of body into a fresh buffer, grown as
// the bytes arrive.
func readBody(r io.Reader, n int) ([]byte, error) {
	buf := make([]byte, 0, min(n, frameStep))
	for len(buf) < n {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(n-len(buf), cap(buf)))
		}
		m, err := r.Read(buf[len(buf):min(cap(buf), n)])
		buf = buf[:len(buf)+m]
		if err != nil && len(buf) < n {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return buf, nil
}

// decodeRequest parses a frame's header and body. A request at a version
// this listener does not serve comes back with ErrUnsupportedVersion and,
// when it can still be answered (versions.go), the request parsed at its
// version; an ApiVersions one with its header and a nil request: KIP-511
// answers it. The request's byte fields alias frame.
func decodeRequest(frame []byte) (header, kmsg.Request, error) {
	if len(frame) < 10 {
		return header{}, nil, fmt.Errorf("%w: %d byte frame", ErrMalformed, len(frame))
	}
	h := header{
		key:         int16(binary.BigEndian.Uint16(frame)),
		version:     int16(binary.BigEndian.Uint16(frame[2:])),
		correlation: int32(binary.BigEndian.Uint32(frame[4:])),
	}
	rest := frame[8:]
	idLen := int16(binary.BigEndian.Uint16(rest))
	rest = rest[2:]
	if idLen > 0 {
		if int(idLen) > len(rest) {
			return h, nil, fmt.Errorf("%w: client id of %d bytes in %d", ErrMalformed, idLen, len(rest))
		}
		h.clientID = string(rest[:idLen])
		rest = rest[idLen:]
	}
	span, ok := apis[h.key]
	if !ok {
		return h, nil, fmt.Errorf("%w %d", ErrUnknownAPI, h.key)
	}
	if h.version < span.min || h.version > span.max {
		var req kmsg.Request
		if h.key != apiVersionsKey {
			req = unsupportedRequest(h, rest)
		}
		return h, req, fmt.Errorf("%w: api %d version %d, served %d to %d", ErrUnsupportedVersion, h.key, h.version, span.min, span.max)
	}
	req := kmsg.RequestForKey(h.key)
	req.SetVersion(h.version)
	if err := parseBody(req, rest); err != nil {
		return h, nil, fmt.Errorf("%w: api %d v%d: %v", ErrMalformed, h.key, h.version, err)
	}
	return h, req, nil
}

// parseBody reads a request's body (after the client id) at its version:
// the header's tag section for a flexible version, then the fields.
func parseBody(req kmsg.Request, body []byte) error {
	if req.IsFlexible() {
		r := kbin.Reader{Src: body}
		kmsg.SkipTags(&r)
		if !r.Ok() {
			return errors.New("header tags")
		}
		body = r.Src
	}
	return req.ReadFrom(body)
}

// appendResponse appends resp, framed for correlation id corr, to dst.
func appendResponse(dst []byte, corr int32, resp kmsg.Response) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(corr))
	if resp.IsFlexible() && resp.Key() != apiVersionsKey {
		dst = append(dst, 0) // response header v1: no tags
	}
	dst = resp.AppendTo(dst)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

// apiVersionsResponse is the answer to ApiVersions at version v (0 for the
// KIP-511 downgrade, with code UNSUPPORTED_VERSION).
func apiVersionsResponse(v int16, code int16) *kmsg.ApiVersionsResponse {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.SetVersion(v)
	resp.ErrorCode = code
	for key, span := range apis {
		k := kmsg.NewApiVersionsResponseApiKey()
		k.ApiKey, k.MinVersion, k.MaxVersion = key, span.min, span.max
		resp.ApiKeys = append(resp.ApiKeys, k)
	}
	return resp
}
