package subscribers

import (
	"errors"

	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/wire"
)

// errHistoryMissing ends a subscription whose history read came back empty
// or from another offset: retention took it between the subscribe and the
// read, and skipping it silently would be a gap.
var errHistoryMissing = errors.New("subscribers: history below the requested offset is gone")

// historyFrame encodes one page of history as an event batch. Unlike live
// envelopes it is this subscription's own: a replay is per subscriber.
func historyFrame(page streams.ReadPage, offsets bool) []byte {
	payloads := make([][]byte, len(page.Records))
	for i, r := range page.Records {
		payloads[i] = r.Value
	}
	if offsets {
		return wire.AppendEventBatchOffsets(nil, page.Records[0].Offset, payloads)
	}
	return wire.AppendEventBatch(nil, payloads)
}
