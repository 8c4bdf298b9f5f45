package broker

import (
	"slices"
	"time"

	"github.com/getfelix/felix-go/persistence"
	"github.com/getfelix/felix-go/service"
)

// encodeAttrs is a publish's record attributes as the log stores them
// (persistence.EncodeRecordAttrs), or nil when no record has any, so such
// a batch is written exactly as before. Records' own times are kept when
// keepTimes is set (a stream that is not LogAppendTime).
func encodeAttrs(attrs []service.RecordAttrs, keepTimes bool) [][]byte {
	var out [][]byte
	for i, a := range attrs {
		if !keepTimes {
			a.Time = time.Time{}
		}
		codec := codecID(a.Codec)
		if a.Key == nil && len(a.Headers) == 0 && a.Time.IsZero() && codec == 0 && a.Batch <= 0 {
			continue
		}
		if out == nil {
			out = make([][]byte, len(attrs))
		}
		hs := make([]persistence.Header, len(a.Headers))
		for j, h := range a.Headers {
			hs[j] = persistence.Header{Key: h.Key, Value: h.Value}
		}
		out[i] = persistence.EncodeRecordAttrs(persistence.RecordAttrs{Key: a.Key, Headers: hs, Time: a.Time, Codec: codec, Batch: uint32(max(a.Batch, 0))})
	}
	return out
}

// codecID is how the log keeps a record's codec: its index in
// service.Codecs plus one, 0 for none or a name it does not know.
//
// NOTE: readfront decodes it back (withAttrs); the two must agree.
func codecID(name string) uint8 {
	return uint8(slices.Index(service.Codecs, name) + 1)
}
