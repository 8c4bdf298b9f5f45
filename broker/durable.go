package broker

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/getfelix/felix-go/persistence"
	"github.com/getfelix/felix-go/replication"
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

func (l durableLog) AppendStamped(base uint64, records [][]byte, now time.Time, stamp streams.Stamp) error {
	_, err := l.Log.AppendStamped(base, records, now, &persistence.Stamp{Producer: stamp.Producer, Sequence: stamp.Sequence, Digest: stamp.Digest})
	return err
}

func (l durableLog) AppendWithAttrs(base uint64, records, attrs [][]byte, now time.Time, stamp *streams.Stamp) error {
	var ps *persistence.Stamp
	if stamp != nil {
		ps = &persistence.Stamp{Producer: stamp.Producer, Sequence: stamp.Sequence, Digest: stamp.Digest}
	}
	_, err := l.Log.AppendAttributed(base, records, attrs, now, ps)
	return err
}

func (l durableLog) Stamps(from uint64, fn func(s streams.Stamp, base uint64, count uint32) bool) error {
	return l.Log.Stamps(from, func(s persistence.Stamp, base uint64, count uint32) bool {
		return fn(streams.Stamp{Producer: s.Producer, Sequence: s.Sequence, Digest: s.Digest}, base, count)
	})
}

func (l durableLog) EnforceRetention(now time.Time) error {
	_, err := l.Log.EnforceRetention(now)
	return err
}

func (l durableLog) Read(from uint64, maxRecords, maxBytes int) (streams.ReadPage, error) {
	p, err := l.Log.Read(from, maxRecords, maxBytes)
	out := streams.ReadPage{Next: p.Next, Records: make([]streams.Record, len(p.Records))}
	for i, r := range p.Records {
		out.Records[i] = streams.Record{Offset: r.Offset, Time: r.Time, Value: r.Value, Attrs: r.Attrs}
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
	cfg, err := b.logConfig(def)
	if err != nil {
		return nil, false, err
	}
	policy := cfg.Fsync
	if def.Replicated() {
		if err := b.prepareReplicaDir(def, shard); err != nil {
			return nil, false, err
		}
	}
	opts := []persistence.Option{persistence.WithFileCache(b.logFileCache())}
	if b.cfg.Chaos {
		opts = append(opts, persistence.WithFS(&b.disk))
	}
	log, err := persistence.Open(b.logDir(def, shard), cfg, opts...)
	if err != nil {
		return nil, false, err
	}
	if def.Replicated() {
		// Raft's storage makes entries durable before a replica
		// acknowledges them under on_commit (SetLazySync): the shard's
		// acknowledgement then waits for a quorum's disks, not its own
		// fsync waiter.
		return replicatedLog{durableLog: durableLog{Log: log, onCommit: policy == persistence.FsyncOnCommit}, applied: new(atomic.Uint64)}, false, nil
	}
	onCommit := policy == persistence.FsyncOnCommit
	return durableLog{Log: log, onCommit: onCommit}, onCommit, nil
}

// logConfig is a durable stream's log configuration: the broker's storage
// settings, with the stream's own retention when it has one.
func (b *Broker) logConfig(def streams.Def) (persistence.Config, error) {
	policy, err := persistence.ParseFsyncPolicy(b.cfg.DurableFsync)
	if err != nil {
		return persistence.Config{}, err
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
	return cfg, nil
}

// fdReserve is the share of the process's descriptor limit the durable
// logs never take, whatever durable_max_open_files says: it stays for
// everything else that needs descriptors (the admin endpoint's HTTP
// connections, metadata.db, directory fsyncs, opening a log to recover it,
// the QUIC socket, the runtime). A quarter of the limit, and at least
// minFDReserve.
const (
	fdReserveShare = 4
	minFDReserve   = 256
)

// logFileCache returns the cache every durable log opens its files
// through: durable_max_open_files, capped at the process's descriptor
// limit minus the reserve (issue 11: with 4 descriptors per shard for ever,
// one client exhausted the limit and /live stopped answering).
func (b *Broker) logFileCache() *persistence.FileCache {
	b.logFiles.once.Do(func() {
		bound := b.cfg.DurableMaxOpenFiles
		if limit, ok := openFileLimit(); ok {
			if capped := limit - max(limit/fdReserveShare, minFDReserve); capped < bound {
				b.log.Warn().Int("durable_max_open_files", bound).Int("limit", limit).Int("capped_to", capped).
					Msg("durable_max_open_files leaves no reserve under the process's open-file limit; capped")
				bound = capped
			}
		}
		b.logFiles.cache = persistence.NewFileCache(bound)
	})
	return b.logFiles.cache
}

// durableFiles is the broker's file cache, made on first use.
type durableFiles struct {
	once  sync.Once
	cache *persistence.FileCache
}

// removeShardLog deletes one shard's log: its replica moved to another
// member. Renamed away first, like removeLogs, so the shard made again
// here later (the replica moved back) starts empty.
func (b *Broker) removeShardLog(scope wire.Scope, shard uint32) {
	dir := b.logDir(streams.Def{Scope: scope}, shard)
	// A copy of a leader's segments staged for the replica goes with it.
	if err := os.RemoveAll(dir + replication.StagedSuffix); err != nil {
		b.log.Warn().Err(err).Str("dir", dir).Msg("delete a moved replica's staged snapshot")
	}
	trash := fmt.Sprintf("%s%s%d", dir, wire.TrashSuffix, time.Now().UnixNano())
	if err := os.Rename(dir, trash); err != nil {
		b.log.Warn().Err(err).Str("dir", dir).Msg("delete a moved replica's data")
		return
	}
	if err := os.RemoveAll(trash); err != nil {
		b.log.Warn().Err(err).Str("dir", trash).Msg("delete a moved replica's data")
	}
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
