package service

import (
	"context"
	"time"

	"github.com/getfelix/felix-go/wire"
)

// Caches is what a Session also serves when the broker has caches: a
// front end asks for it with a type assertion, so a Session without it
// (a test's) need not grow these methods. A cache is named as a stream
// is (tenant, namespace, cache) and shares the streams' namespace: a
// cache is a stream whose records are key writes.
type Caches interface {
	// CreateCache creates a cache, or confirms one with the same settings.
	CreateCache(ctx context.Context, spec *CacheSpec) (*CacheInfo, error)
	// Cache describes one.
	Cache(ctx context.Context, scope wire.Scope) (*CacheInfo, error)
	// CacheWrite runs one write on its key's shard and answers once it
	// applied there (committed: durable, or on a quorum).
	CacheWrite(ctx context.Context, w *CacheWrite) (*CacheWriteResult, error)
	// CacheGet reads a key from its shard's applied index.
	CacheGet(ctx context.Context, scope wire.Scope, key string) (CacheEntry, bool, error)
	// CacheList reads one shard's keys by prefix, after after, at most
	// limit; next is the following page's after, "" at the end.
	CacheList(ctx context.Context, scope wire.Scope, shard uint32, prefix, after string, limit int) (page []CacheEntry, next string, err error)
	// CounterGet reads a counter.
	CounterGet(ctx context.Context, scope wire.Scope, key string) (CacheCounter, bool, error)
	// StateGet reads keys of one shard as of one applied offset.
	StateGet(ctx context.Context, scope wire.Scope, keys []string) ([]CacheLookup, uint64, error)
	// CacheWatch registers a watch of a key, or of a prefix on one
	// shard, as a subscription: open is called once with its id, and
	// every change from CacheWatchStarted.Resume on is written to the
	// sink as an event batch of wire.CacheWatchEvent payloads, the
	// snapshot or the replayed changes first.
	CacheWatch(ctx context.Context, req *CacheWatch, open OpenSink) (*CacheWatchStarted, error)
}

// CacheWatch asks for a watch of Key, or with Prefix of every key
// starting with Key on shard Shard. From, when set, resumes at that
// version; Retained sends the current values first. SnapshotEnd marks
// the end of every retained snapshot (wire.WatchSnapshotEnd): the
// connection negotiated wire.FeatureCacheSnapshotEnd.
type CacheWatch struct {
	Scope         wire.Scope
	Key           string
	Prefix        bool
	Shard         uint32
	From          *uint64
	Retained      bool
	QueueCapacity int64
	SnapshotEnd   bool
}

// CacheWatchStarted answers CacheWatch (wire.CacheWatchStarted says what
// each field means).
type CacheWatchStarted struct {
	ID            uint64
	Shard         uint32
	Shards        uint32
	Resume        uint64
	Resnapshot    bool
	ResumableFrom uint64
	Retained      int
	QueueCapacity int
}

// CacheSpec is what a cache is created with.
type CacheSpec struct {
	Scope    wire.Scope
	Shards   uint32
	Durable  bool
	Replicas int           // 0 takes the broker's default
	TTL      time.Duration // a put's expiry when it names none; 0: none
	// History is how many changes per key compaction keeps below its
	// horizon (what a watch resumed there can still see), 1 to
	// cache.MaxHistory; 0 takes 1.
	History int
}

// CacheInfo describes a cache.
type CacheInfo struct {
	CacheSpec
	Routing string
	// Floors are each shard's floor, the lowest version a watch may
	// resume from (compaction's last horizon, or the log's start); nil
	// when not every shard answered here (a cluster member describes its
	// own shards only).
	Floors []uint64
}

// CacheWriteKind is what a CacheWrite does.
type CacheWriteKind uint8

// The writes.
const (
	CachePut CacheWriteKind = iota + 1
	CacheDelete
	CounterAdd
	CacheCommit
)

// CacheWrite is one write. Key routes it (a commit's ops must all route
// to the same shard as Key).
type CacheWrite struct {
	Scope wire.Scope
	Kind  CacheWriteKind
	Key   string
	Value []byte
	// TTL is a put's expiry; 0 takes the cache's.
	TTL       time.Duration
	IfAbsent  bool    // put only if the key is absent
	IfVersion *uint64 // put or delete only if the key is at this version
	Delta     int64   // CounterAdd
	Event     []byte  // CacheCommit
	Ops       []CacheCommitOp
}

// CacheCommitOp is one put or delete of a commit.
type CacheCommitOp struct {
	Key    string
	Value  []byte
	Delete bool
	TTL    time.Duration
}

// CacheWriteResult is what a write did. Reason, when nothing applied, is
// one of condition_failed, not_found, full, overflow.
type CacheWriteResult struct {
	Applied bool
	Reason  string
	// Version is the key's version after the write (the write's offset
	// when it applied), meaningful when Present.
	Version uint64
	Present bool
	// Prev is the value a delete removed or a put replaced, when HadPrev.
	Prev    []byte
	HadPrev bool
	Counter int64 // CounterAdd: the total
}

// CacheEntry is a key as read.
type CacheEntry struct {
	Key     string
	Value   []byte
	Version uint64
	Expires time.Time // zero: never
}

// CacheCounter is a counter's total and the offset of the add that set it.
type CacheCounter struct {
	Value   int64
	Version uint64
}

// CacheLookup is one key of StateGet.
type CacheLookup struct {
	CacheEntry
	Found bool
}
