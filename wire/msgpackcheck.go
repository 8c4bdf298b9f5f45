package wire

import (
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
	"strings"

	"github.com/vmihailenco/msgpack/v5"
)

// MaxControlBytes caps a control message whatever the frame cap: control
// messages are small, and msgpack decoding cost grows with what a payload
// claims, not just with its length.
const MaxControlBytes = 64 << 10

// maxControlDepth bounds msgpack nesting in a control message. Ours nest two
// deep ([type, {fields}]); msgpack/v5 decodes recursively, and a deep enough
// payload would overflow the goroutine stack, which recover cannot catch.
const maxControlDepth = 8

// checkMsgpack checks a control message's payload (CheckMsgpack).
func checkMsgpack(b []byte) error { return CheckMsgpack(b, maxControlDepth) }

// CheckMsgpack walks one msgpack value without recursion and refuses what
// would make msgpack/v5 misbehave before it sees the bytes: nesting deeper
// than maxDepth, any length or count larger than the bytes left (the
// library preallocates from claimed lengths, and a 6-byte payload claiming a
// 4 GiB string cost it a megabyte per call), reserved codes, and trailing
// bytes. Its errors wrap ErrMalformed. Every front end that decodes msgpack
// from a client walks it first.
func CheckMsgpack(b []byte, maxDepth int) error {
	// pending[i] is how many values are still owed at depth i.
	pending := make([]uint64, 1, maxDepth+1)
	pending[0] = 1
	for len(pending) > 0 {
		if pending[len(pending)-1] == 0 {
			pending = pending[:len(pending)-1]
			continue
		}
		pending[len(pending)-1]--
		if len(b) == 0 {
			return fmt.Errorf("%w: msgpack ends inside a value", ErrMalformed)
		}
		c := b[0]
		b = b[1:]
		skip, items, width, err := msgpackShape(c)
		if err != nil {
			return err
		}
		if width > 0 {
			var n uint64
			if n, b, err = msgpackLength(b, width); err != nil {
				return err
			}
			switch c {
			case 0xdc, 0xdd:
				items = n
			case 0xde, 0xdf:
				items = 2 * n
			default:
				skip += n
			}
		}
		if skip > uint64(len(b)) || items > uint64(len(b)) {
			return fmt.Errorf("%w: msgpack value claims more than the %d bytes left", ErrMalformed, len(b))
		}
		b = b[skip:]
		if items > 0 {
			if len(pending) > maxDepth {
				return fmt.Errorf("%w: msgpack nested deeper than %d", ErrMalformed, maxDepth)
			}
			pending = append(pending, items)
		}
	}
	if len(b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes after the msgpack value", ErrMalformed, len(b))
	}
	return nil
}

// msgpackShape says what follows a msgpack code: bytes to skip, values
// owed (an array's items, a map's keys and values), and the width of a
// length prefix that adds to one or the other.
func msgpackShape(c byte) (skip, items uint64, width int, err error) {
	switch {
	case c <= 0x7f, c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3:
	case c >= 0x80 && c <= 0x8f:
		items = 2 * uint64(c&0x0f)
	case c >= 0x90 && c <= 0x9f:
		items = uint64(c & 0x0f)
	case c >= 0xa0 && c <= 0xbf:
		skip = uint64(c & 0x1f)
	case c == 0xc4, c == 0xd9:
		width = 1
	case c == 0xc5, c == 0xda:
		width = 2
	case c == 0xc6, c == 0xdb:
		width = 4
	case c == 0xc7:
		width, skip = 1, 1 // + type byte
	case c == 0xc8:
		width, skip = 2, 1
	case c == 0xc9:
		width, skip = 4, 1
	case c == 0xcc, c == 0xd0:
		skip = 1
	case c == 0xcd, c == 0xd1:
		skip = 2
	case c == 0xca, c == 0xce, c == 0xd2:
		skip = 4
	case c == 0xcb, c == 0xcf, c == 0xd3:
		skip = 8
	case c >= 0xd4 && c <= 0xd8:
		skip = 1 + 1<<(c-0xd4)
	case c == 0xdc, c == 0xde:
		width = 2
	case c == 0xdd, c == 0xdf:
		width = 4
	default:
		err = fmt.Errorf("%w: reserved msgpack code %#02x", ErrMalformed, c)
	}
	return skip, items, width, err
}

// msgpackLength reads a big-endian length prefix of width bytes.
func msgpackLength(b []byte, width int) (uint64, []byte, error) {
	if len(b) < width {
		return 0, b, fmt.Errorf("%w: control message ends inside a length", ErrMalformed)
	}
	var n uint64
	switch width {
	case 1:
		n = uint64(b[0])
	case 2:
		n = uint64(binary.BigEndian.Uint16(b))
	case 4:
		n = uint64(binary.BigEndian.Uint32(b))
	}
	return n, b[width:], nil
}

// checkIntRanges refuses integer fields whose wire value does not fit the Go
// field: msgpack/v5 stores decoded integers with reflect's SetUint/SetInt,
// which truncate silently (a code of 70000 would become 4464). Control
// messages are rare, so decoding the body twice costs nothing that matters.
// Nested structs are checked too (a ShardOwner's shard, an Owner's
// generation), through pointers and slices.
func checkIntRanges(body []byte, m Message) error {
	var raw map[string]any
	if err := msgpack.Unmarshal(body, &raw); err != nil {
		return fmt.Errorf("%w: %s body: %v", ErrMalformed, m.Type(), err)
	}
	if err := fitsStruct(raw, reflect.TypeOf(m).Elem()); err != nil {
		return fmt.Errorf("%w: %s.%v", ErrMalformed, m.Type(), err)
	}
	return nil
}

// fitsStruct checks the integers of raw, a decoded msgpack map, against
// struct type t's fields; its error starts with the field's path.
func fitsStruct(raw map[string]any, t reflect.Type) error {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("msgpack"), ",")
		v, ok := raw[name]
		if !ok || name == "" {
			continue
		}
		if err := fitsValue(v, f.Type); err != nil {
			return fmt.Errorf("%s%v", name, err)
		}
	}
	return nil
}

// fitsValue checks v against type t, descending into structs and slices.
// A value of another shape is left to msgpack, which reports mismatches.
func fitsValue(v any, t reflect.Type) error {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		if m, ok := v.(map[string]any); ok {
			if err := fitsStruct(m, t); err != nil {
				return fmt.Errorf(".%v", err)
			}
		}
		return nil
	case reflect.Slice:
		items, _ := v.([]any)
		for i, item := range items {
			if err := fitsValue(item, t.Elem()); err != nil {
				return fmt.Errorf("[%d]%v", i, err)
			}
		}
		return nil
	}
	if err := fitsKind(v, t); err != nil {
		return fmt.Errorf(": %v", err)
	}
	return nil
}

func fitsKind(v any, t reflect.Type) error {
	var i int64
	var u uint64
	neg := false
	switch x := v.(type) {
	case int8:
		i, neg = int64(x), x < 0
	case int16:
		i, neg = int64(x), x < 0
	case int32:
		i, neg = int64(x), x < 0
	case int64:
		i, neg = x, x < 0
	case uint8:
		u = uint64(x)
	case uint16:
		u = uint64(x)
	case uint32:
		u = uint64(x)
	case uint64:
		u = x
	default:
		return nil // not an integer: msgpack reports type mismatches itself
	}
	if !neg && i > 0 {
		u = uint64(i)
	}
	switch t.Kind() {
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uint:
		if neg {
			return fmt.Errorf("negative value %d for an unsigned field", i)
		}
		if bits := t.Bits(); bits < 64 && u > 1<<bits-1 {
			return fmt.Errorf("value %d overflows %d bits", u, bits)
		}
	case reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Int:
		bits := t.Bits()
		if neg {
			if bits < 64 && i < -(1<<(bits-1)) {
				return fmt.Errorf("value %d overflows %d bits", i, bits)
			}
		} else if u > uint64(math.MaxInt64)>>(64-bits) {
			return fmt.Errorf("value %d overflows %d bits", u, bits)
		}
	}
	return nil
}
