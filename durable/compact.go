package durable

import (
	"github.com/getfelix/felix-go/persistence"
	"github.com/getfelix/felix-go/streams"
)

// A durable log compacts for a cache shard (streams.CompactableLog); only
// a cache's shard asks, and only when unreplicated.
var _ streams.CompactableLog = Log{}

func (l Log) PrepareCompaction(horizon uint64, keep func(offset uint64, value []byte) ([]byte, bool, error)) (streams.PreparedCompaction, error) {
	c, err := l.Log.PrepareCompaction(horizon, keep)
	if err != nil {
		return nil, err
	}
	return preparedCompaction{c}, nil
}

// preparedCompaction adapts persistence's Compaction to the shard's view.
type preparedCompaction struct{ c *persistence.Compaction }

func (p preparedCompaction) Horizon() uint64 { return p.c.Horizon() }
func (p preparedCompaction) Abort() error    { return p.c.Abort() }

func (p preparedCompaction) Commit() (streams.CompactionStats, error) {
	st, err := p.c.Commit()
	return streams.CompactionStats{Segments: st.Segments, RecordsRemoved: st.RecordsRemoved, BytesRemoved: st.BytesRemoved}, err
}
