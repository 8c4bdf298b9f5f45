// Package durable is a broker's durable shard logs on its disk: where each
// shard's log lives (<data_dir>/streams/<t>/<ns>/<s>/<shard>), how it is
// configured (the broker's storage settings, a stream's own retention,
// none for a cache, whose compaction is its retention), the bound on open
// descriptors every log shares (one file cache, capped below the process's
// limit), persistence.Log adapted to what a shard needs (Log, a
// streams.Log), and a deleted stream's data removed.
//
// It opens and removes; the shard that opened a log owns it from then on.
package durable

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/persistence"
	"github.com/getfelix/felix-go/streams"
	"github.com/getfelix/felix-go/wire"
)

// Config is the broker's storage settings (the durable_* knobs).
type Config struct {
	DataDir        string
	Fsync          string // durable_fsync: on_commit, periodic or none
	SegmentBytes   int64
	SyncInterval   time.Duration
	RetentionBytes int64
	RetentionAge   time.Duration
	// MaxOpenFiles is durable_max_open_files, capped at the process's
	// descriptor limit minus a reserve.
	MaxOpenFiles int
	// FS, when set, is the file system the logs use (--chaos's failing
	// disk); nil is the operating system's.
	FS  persistence.FS
	Log zerolog.Logger
}

// Logs opens and removes a broker's durable shard logs.
type Logs struct {
	cfg    Config
	policy persistence.FsyncPolicy
	files  struct {
		once  sync.Once
		cache *persistence.FileCache
	}
}

// New checks cfg and makes the broker's logs.
func New(cfg Config) (*Logs, error) {
	policy, err := persistence.ParseFsyncPolicy(cfg.Fsync)
	if err != nil {
		return nil, err
	}
	return &Logs{cfg: cfg, policy: policy}, nil
}

// Dir is where a shard's log lives. Names are restricted to
// [A-Za-z0-9._-] and never "." or "..", so they are safe as path elements.
func (l *Logs) Dir(def streams.Def, shard uint32) string {
	return filepath.Join(l.streamDir(def), fmt.Sprint(shard))
}

func (l *Logs) streamDir(def streams.Def) string {
	return filepath.Join(l.cfg.DataDir, "streams", def.Scope.Tenant, def.Scope.Namespace, def.Scope.Stream)
}

// Config is a durable stream's log configuration: the broker's storage
// settings, with the stream's own retention when it has one.
func (l *Logs) Config(def streams.Def) persistence.Config {
	cfg := persistence.Config{
		SegmentBytes:   l.cfg.SegmentBytes,
		Fsync:          l.policy,
		SyncInterval:   l.cfg.SyncInterval,
		RetentionBytes: l.cfg.RetentionBytes,
		RetentionAge:   l.cfg.RetentionAge,
	}
	if def.RetentionBytes > 0 || def.RetentionAge > 0 {
		cfg.RetentionBytes, cfg.RetentionAge = def.RetentionBytes, def.RetentionAge
	}
	if def.Cache != nil {
		// Retention deletes segments whatever they hold: on a cache, live
		// keys. A cache keeps its whole log (compaction is its retention).
		cfg.RetentionBytes, cfg.RetentionAge = 0, 0
	}
	return cfg
}

// Open opens (recovering) a durable shard's log in its directory, which a
// replicated shard's member has prepared first.
func (l *Logs) Open(def streams.Def, shard uint32) (Log, error) {
	opts := []persistence.Option{persistence.WithFileCache(l.fileCache())}
	if l.cfg.FS != nil {
		opts = append(opts, persistence.WithFS(l.cfg.FS))
	}
	log, err := persistence.Open(l.Dir(def, shard), l.Config(def), opts...)
	if err != nil {
		return Log{}, err
	}
	return Log{Log: log, onCommit: l.policy == persistence.FsyncOnCommit}, nil
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

// fileCache returns the cache every durable log opens its files through:
// durable_max_open_files, capped at the process's descriptor limit minus
// the reserve (with 4 descriptors per shard for ever, one client exhausted
// the limit and /live stopped answering).
func (l *Logs) fileCache() *persistence.FileCache {
	l.files.once.Do(func() {
		bound := l.cfg.MaxOpenFiles
		if limit, ok := openFileLimit(); ok {
			if capped := limit - max(limit/fdReserveShare, minFDReserve); capped < bound {
				l.cfg.Log.Warn().Int("durable_max_open_files", bound).Int("limit", limit).Int("capped_to", capped).
					Msg("durable_max_open_files leaves no reserve under the process's open-file limit; capped")
				bound = capped
			}
		}
		l.files.cache = persistence.NewFileCache(bound)
	})
	return l.files.cache
}

// Remove deletes a deleted durable stream's data. The directory is renamed
// first, at once, so a stream created again with the same name starts
// empty even while the old shards are still closing their files.
func (l *Logs) Remove(def streams.Def) {
	dir := l.streamDir(def)
	trash := fmt.Sprintf("%s%s%d", dir, wire.TrashSuffix, time.Now().UnixNano()) // no stream name ends like it (wire.ValidateName)
	if err := os.Rename(dir, trash); err != nil {
		if !os.IsNotExist(err) {
			l.cfg.Log.Warn().Err(err).Str("dir", dir).Msg("delete durable stream data")
		}
		return
	}
	if err := os.RemoveAll(trash); err != nil {
		l.cfg.Log.Warn().Err(err).Str("dir", trash).Msg("delete durable stream data")
	}
}
