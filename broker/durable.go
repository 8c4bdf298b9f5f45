package broker

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/getfelix/felix-go/persistence"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/wire"
)

// durableLog adapts persistence.Log to what a durable shard needs.
type durableLog struct {
	*persistence.Log
	onCommit bool
}

func (l durableLog) Append(base uint64, records [][]byte, now time.Time) error {
	_, err := l.Log.Append(base, records, now)
	return err
}

func (l durableLog) EnforceRetention(now time.Time) error {
	_, err := l.Log.EnforceRetention(now)
	return err
}

func (l durableLog) Read(from uint64, maxRecords, maxBytes int) (streams.ReadPage, error) {
	p, err := l.Log.Read(from, maxRecords, maxBytes)
	out := streams.ReadPage{Next: p.Next, Records: make([]streams.Record, len(p.Records))}
	for i, r := range p.Records {
		out.Records[i] = streams.Record{Offset: r.Offset, Time: r.Time, Value: r.Value}
	}
	return out, err
}

func (l durableLog) Failed() error { return l.Log.Err() }

func (l durableLog) Committed() uint64 {
	if l.onCommit {
		return l.Log.Synced()
	}
	return l.Log.NextOffset()
}

// logDir is where a shard's log lives: <data_dir>/streams/<t>/<ns>/<s>/<shard>.
// Names are restricted to [A-Za-z0-9._-] and never "." or "..", so they are
// safe as path elements.
func (b *Broker) logDir(def streams.Def, shard uint32) string {
	return filepath.Join(b.cfg.DataDir, "streams", def.Scope.Tenant, def.Scope.Namespace, def.Scope.Stream, fmt.Sprint(shard))
}

// openLog opens a durable shard's log with the broker's storage settings
// and the stream's own retention when it has one.
func (b *Broker) openLog(def streams.Def, shard uint32) (streams.Log, bool, error) {
	policy, err := persistence.ParseFsyncPolicy(b.cfg.DurableFsync)
	if err != nil {
		return nil, false, err
	}
	cfg := persistence.Config{
		SegmentBytes:   b.cfg.DurableSegmentBytes,
		Fsync:          policy,
		SyncInterval:   b.cfg.DurableSyncInterval,
		RetentionBytes: b.cfg.DurableRetentionBytes,
		RetentionAge:   b.cfg.DurableRetentionAge,
	}
	if def.RetentionBytes > 0 || def.RetentionAge > 0 {
		cfg.RetentionBytes, cfg.RetentionAge = def.RetentionBytes, def.RetentionAge
	}
	log, err := persistence.Open(b.logDir(def, shard), cfg)
	if err != nil {
		return nil, false, err
	}
	onCommit := policy == persistence.FsyncOnCommit
	return durableLog{Log: log, onCommit: onCommit}, onCommit, nil
}

// removeLogs deletes a deleted durable stream's data. The directory is
// renamed first, at once, so a stream created again with the same name
// starts empty even while the old shards are still closing their files.
func (b *Broker) removeLogs(def streams.Def) {
	dir := filepath.Join(b.cfg.DataDir, "streams", def.Scope.Tenant, def.Scope.Namespace, def.Scope.Stream)
	trash := fmt.Sprintf("%s%s%d", dir, wire.TrashSuffix, time.Now().UnixNano()) // no stream name ends like it (wire.ValidateName)
	if err := os.Rename(dir, trash); err != nil {
		if !os.IsNotExist(err) {
			b.log.Warn().Err(err).Str("dir", dir).Msg("delete durable stream data")
		}
		return
	}
	if err := os.RemoveAll(trash); err != nil {
		b.log.Warn().Err(err).Str("dir", trash).Msg("delete durable stream data")
	}
}
