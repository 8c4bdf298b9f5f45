package durable

import (
	"time"

	"github.com/getfelix/felix-go/persistence"
	"github.com/getfelix/felix-go/streams"
)

// Log adapts persistence.Log to what a durable shard needs (streams.Log).
type Log struct {
	*persistence.Log
	onCommit bool
}

var _ streams.Log = Log{}

// OnCommit says whether an acknowledgement waits for the fsync
// (durable_fsync on_commit): Committed is then the synced end.
func (l Log) OnCommit() bool { return l.onCommit }

func (l Log) Append(base uint64, records [][]byte, now time.Time) error {
	_, err := l.Log.Append(base, records, now)
	return err
}

func (l Log) AppendStamped(base uint64, records [][]byte, now time.Time, stamp streams.Stamp) error {
	_, err := l.Log.AppendStamped(base, records, now, &persistence.Stamp{Producer: stamp.Producer, Sequence: stamp.Sequence, Digest: stamp.Digest})
	return err
}

func (l Log) AppendWithAttrs(base uint64, records, attrs [][]byte, now time.Time, stamp *streams.Stamp) error {
	var ps *persistence.Stamp
	if stamp != nil {
		ps = &persistence.Stamp{Producer: stamp.Producer, Sequence: stamp.Sequence, Digest: stamp.Digest}
	}
	_, err := l.Log.AppendAttributed(base, records, attrs, now, ps)
	return err
}

func (l Log) Stamps(from uint64, fn func(s streams.Stamp, base uint64, count uint32) bool) error {
	return l.Log.Stamps(from, func(s persistence.Stamp, base uint64, count uint32) bool {
		return fn(streams.Stamp{Producer: s.Producer, Sequence: s.Sequence, Digest: s.Digest}, base, count)
	})
}

func (l Log) EnforceRetention(now time.Time) error {
	_, err := l.Log.EnforceRetention(now)
	return err
}

func (l Log) Read(from uint64, maxRecords, maxBytes int) (streams.ReadPage, error) {
	p, err := l.Log.Read(from, maxRecords, maxBytes)
	out := streams.ReadPage{Next: p.Next, Records: make([]streams.Record, len(p.Records))}
	for i, r := range p.Records {
		out.Records[i] = streams.Record{Offset: r.Offset, Time: r.Time, Value: r.Value, Attrs: r.Attrs}
	}
	return out, err
}

func (l Log) Failed() error { return l.Log.Err() }

func (l Log) Committed() uint64 {
	if l.onCommit {
		return l.Log.Synced()
	}
	return l.Log.NextOffset()
}
