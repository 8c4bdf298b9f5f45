package broker

import (
	"github.com/getfelix/felix-go/persistence"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// encodeAttrs is a publish's record attributes as the log stores them
// (persistence.EncodeAttrs), or nil when no record has any, so such a
// batch is written exactly as before.
func encodeAttrs(attrs []service.RecordAttrs) [][]byte {
	var out [][]byte
	for i, a := range attrs {
		if a.Key == nil && len(a.Headers) == 0 {
			continue
		}
		if out == nil {
			out = make([][]byte, len(attrs))
		}
		hs := make([]persistence.Header, len(a.Headers))
		for j, h := range a.Headers {
			hs[j] = persistence.Header{Key: h.Key, Value: h.Value}
		}
		out[i] = persistence.EncodeAttrs(a.Key, hs)
	}
	return out
}

// withAttrs fills r's key and headers from the log's attribute bytes.
func withAttrs(r *service.Record, attrs []byte) error {
	key, hs, err := persistence.DecodeAttrs(attrs)
	if err != nil {
		return wire.WrapError(wire.CodeStorage, err, "record %d's attributes", r.Offset)
	}
	r.Key = key
	if len(hs) > 0 {
		r.Headers = make([]service.Header, len(hs))
		for i, h := range hs {
			r.Headers[i] = service.Header{Key: h.Key, Value: h.Value}
		}
	}
	return nil
}
