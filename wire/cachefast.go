package wire

import (
	"encoding/binary"
	"math"
)

// The cache calls on every put and get (cache_put, cache_get and their
// answers, cache_result and cache_value) are decoded without reflection
// when their body is in the shape this package's encoder writes: a map of
// known field names to values of the field's own msgpack kind. Anything
// else (an unknown field, a value of another kind, an array form) takes
// the general path (DecodeMessageLimit), so both read every body alike;
// FuzzCacheFastDecode holds them to it. The reflection decode, and the
// integer range check before it, were a seventh of a broker's CPU per
// cache call.

// fastBody is a message with a decoder for its common shape. decodeFast
// reports false, leaving the message in any state, when the body is not
// in that shape.
type fastBody interface {
	decodeFast(body []byte) bool
}

// splitEnvelope reads a control payload's [type, body] without
// reflection; ok is false for any other shape (the general path decides).
// The payload was walked (checkMsgpack): it holds one value, so the body
// is what follows the type.
func splitEnvelope(payload []byte) (t MsgType, body []byte, ok bool) {
	if len(payload) < 2 || payload[0] != 0x92 {
		return "", nil, false
	}
	r := fastReader{b: payload, i: 1}
	s, ok := r.str()
	if !ok || r.i >= len(payload) {
		return "", nil, false
	}
	return MsgType(s), payload[r.i:], true
}

// fastReader reads msgpack values of the kinds the fast decoders take.
// Each read reports false for any other encoding, or too few bytes.
type fastReader struct {
	b []byte
	i int
}

func (r *fastReader) take(n int) ([]byte, bool) {
	if n < 0 || n > len(r.b)-r.i {
		return nil, false
	}
	out := r.b[r.i : r.i+n]
	r.i += n
	return out, true
}

func (r *fastReader) code() (byte, bool) {
	if r.i >= len(r.b) {
		return 0, false
	}
	c := r.b[r.i]
	r.i++
	return c, true
}

// length reads an n-byte big-endian length.
func (r *fastReader) length(n int) (int, bool) {
	b, ok := r.take(n)
	if !ok {
		return 0, false
	}
	switch n {
	case 1:
		return int(b[0]), true
	case 2:
		return int(binary.BigEndian.Uint16(b)), true
	}
	v := binary.BigEndian.Uint32(b)
	return int(v), uint64(v) <= math.MaxInt32
}

func (r *fastReader) mapLen() (int, bool) {
	c, ok := r.code()
	switch {
	case !ok:
		return 0, false
	case c >= 0x80 && c <= 0x8f:
		return int(c & 0x0f), true
	case c == 0xde:
		return r.length(2)
	case c == 0xdf:
		return r.length(4)
	}
	return 0, false
}

// str reads a str (not nil, not bin), aliasing the input.
func (r *fastReader) str() ([]byte, bool) {
	c, ok := r.code()
	n := 0
	switch {
	case !ok:
		return nil, false
	case c >= 0xa0 && c <= 0xbf:
		n = int(c & 0x1f)
	case c == 0xd9:
		n, ok = r.length(1)
	case c == 0xda:
		n, ok = r.length(2)
	case c == 0xdb:
		n, ok = r.length(4)
	default:
		return nil, false
	}
	if !ok {
		return nil, false
	}
	return r.take(n)
}

func (r *fastReader) string(dst *string) bool {
	s, ok := r.str()
	*dst = string(s)
	return ok
}

// bytes reads a bin, or nil (a nil slice), into a copy: the frame's
// buffer is not the message's.
func (r *fastReader) bytes(dst *[]byte) bool {
	c, ok := r.code()
	n := 0
	switch {
	case !ok:
		return false
	case c == 0xc0:
		*dst = nil
		return true
	case c == 0xc4:
		n, ok = r.length(1)
	case c == 0xc5:
		n, ok = r.length(2)
	case c == 0xc6:
		n, ok = r.length(4)
	default:
		return false
	}
	if !ok {
		return false
	}
	b, ok := r.take(n)
	if !ok {
		return false
	}
	*dst = append([]byte{}, b...)
	return true
}

// uint reads a non-negative integer in an unsigned encoding.
func (r *fastReader) uint(dst *uint64) bool {
	c, ok := r.code()
	if !ok {
		return false
	}
	if c <= 0x7f {
		*dst = uint64(c)
		return true
	}
	var n int
	switch c {
	case 0xcc:
		n = 1
	case 0xcd:
		n = 2
	case 0xce:
		n = 4
	case 0xcf:
		n = 8
	default:
		return false
	}
	b, ok := r.take(n)
	if !ok {
		return false
	}
	var v uint64
	for _, x := range b {
		v = v<<8 | uint64(x)
	}
	*dst = v
	return true
}

// int reads an integer of either sign that fits an int64.
func (r *fastReader) int(dst *int64) bool {
	if r.i >= len(r.b) {
		return false
	}
	c := r.b[r.i]
	var n int
	switch {
	case c >= 0xe0:
		r.i++
		*dst = int64(int8(c))
		return true
	case c <= 0x7f || (c >= 0xcc && c <= 0xcf):
		var u uint64
		if !r.uint(&u) || u > math.MaxInt64 {
			return false
		}
		*dst = int64(u)
		return true
	case c == 0xd0:
		n = 1
	case c == 0xd1:
		n = 2
	case c == 0xd2:
		n = 4
	case c == 0xd3:
		n = 8
	default:
		return false
	}
	r.i++
	b, ok := r.take(n)
	if !ok {
		return false
	}
	v := int64(int8(b[0])) // sign-extended from the first byte
	for _, x := range b[1:] {
		v = v<<8 | int64(x)
	}
	*dst = v
	return true
}

func (r *fastReader) bool(dst *bool) bool {
	c, ok := r.code()
	switch {
	case ok && c == 0xc2:
		*dst = false
	case ok && c == 0xc3:
		*dst = true
	default:
		return false
	}
	return true
}

// optUint reads nil (a nil pointer) or an unsigned integer.
func (r *fastReader) optUint(dst **uint64) bool {
	if r.i < len(r.b) && r.b[r.i] == 0xc0 {
		r.i++
		*dst = nil
		return true
	}
	var v uint64
	if !r.uint(&v) {
		return false
	}
	*dst = &v
	return true
}

// fields reads a map body, handing each key to field, which reads its
// value and reports whether it knew the key and read it.
func (r *fastReader) fields(field func(key string) bool) bool {
	n, ok := r.mapLen()
	if !ok {
		return false
	}
	for range n {
		key, ok := r.str()
		if !ok || !field(string(key)) {
			return false
		}
	}
	return r.i == len(r.b)
}

func (m *CachePut) decodeFast(body []byte) bool {
	r := fastReader{b: body}
	return r.fields(func(key string) bool {
		switch key {
		case "request_id":
			return r.uint(&m.RequestID)
		case "tenant":
			return r.string(&m.Tenant)
		case "namespace":
			return r.string(&m.Namespace)
		case "cache":
			return r.string(&m.Cache)
		case "key":
			return r.string(&m.Key)
		case "value":
			return r.bytes(&m.Value)
		case "ttl_ms":
			return r.int(&m.TTLMS)
		case "if_absent":
			return r.bool(&m.IfAbsent)
		case "if_version":
			return r.optUint(&m.IfVersion)
		}
		return false
	})
}

func (m *CacheGet) decodeFast(body []byte) bool {
	r := fastReader{b: body}
	return r.fields(func(key string) bool {
		switch key {
		case "request_id":
			return r.uint(&m.RequestID)
		case "tenant":
			return r.string(&m.Tenant)
		case "namespace":
			return r.string(&m.Namespace)
		case "cache":
			return r.string(&m.Cache)
		case "key":
			return r.string(&m.Key)
		}
		return false
	})
}

func (m *CacheResult) decodeFast(body []byte) bool {
	r := fastReader{b: body}
	return r.fields(func(key string) bool {
		switch key {
		case "request_id":
			return r.uint(&m.RequestID)
		case "applied":
			return r.bool(&m.Applied)
		case "reason":
			return r.string(&m.Reason)
		case "version":
			return r.uint(&m.Version)
		case "present":
			return r.bool(&m.Present)
		case "had_prev":
			return r.bool(&m.HadPrev)
		case "prev":
			return r.bytes(&m.Prev)
		}
		return false
	})
}

func (m *CacheValue) decodeFast(body []byte) bool {
	r := fastReader{b: body}
	return r.fields(func(key string) bool {
		switch key {
		case "request_id":
			return r.uint(&m.RequestID)
		case "found":
			return r.bool(&m.Found)
		case "key":
			return r.string(&m.Key)
		case "value":
			return r.bytes(&m.Value)
		case "version":
			return r.uint(&m.Version)
		case "expires_ms":
			return r.int(&m.ExpiresMS)
		}
		return false
	})
}
