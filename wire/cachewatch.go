package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Cache watches. A watch is a subscription of one cache shard: CacheWatch
// asks for it on a control stream, the broker opens its event stream (an
// EventStreamHello naming the subscription, as for Subscribe) and answers
// CacheWatchStarted. Each event of the stream's event batches is one
// change, encoded by AppendCacheWatchEvent, in version order; a watch that
// falls behind ends with SubscriptionLagged naming the version to resume
// from. Behind FeatureCache, as every cache message; the end of a
// retained snapshot is marked (WatchSnapshotEnd) only on a connection
// that negotiated FeatureCacheSnapshotEnd as well.

const (
	TypeCacheWatch        MsgType = "cache_watch"
	TypeCacheWatchStarted MsgType = "cache_watch_started"

	// FeatureCacheSnapshotEnd: a retained snapshot is followed by a
	// WatchSnapshotEnd event. A client that does not offer it is never
	// sent one (its decoder would refuse the kind).
	FeatureCacheSnapshotEnd uint32 = 0x0000_0008
)

// CacheWatch asks for the changes of Key on its shard, or, with Prefix
// set, of every key starting with Key on shard Shard (a prefix watch of a
// cache spans its shards: one CacheWatch each). Where it starts: by
// default at the next change; at FromVersion, every change at that
// version or later (a resume); with Retained, the current value of every
// matching key first (marked retained), then every change after them.
// QueueCapacity asks for the watch's queue capacity in changes, zero the
// broker's default. Answered by CacheWatchStarted.
type CacheWatch struct {
	RequestID     uint64  `msgpack:"request_id"`
	Tenant        string  `msgpack:"tenant"`
	Namespace     string  `msgpack:"namespace"`
	Cache         string  `msgpack:"cache"`
	Key           string  `msgpack:"key"`
	Prefix        bool    `msgpack:"prefix,omitempty"`
	Shard         uint32  `msgpack:"shard,omitempty"`
	FromVersion   *uint64 `msgpack:"from_version,omitempty"`
	Retained      bool    `msgpack:"retained,omitempty"`
	QueueCapacity int64   `msgpack:"queue_capacity,omitempty"`
}

// CacheWatchStarted answers CacheWatch. Shard is the shard watched, of
// the cache's Shards (a prefix watch's client learns there how many
// shards to watch).
// Resume is the version the changes start from: every change from it on
// is delivered. Resnapshot says a FromVersion was below what the shard can
// still replay (ResumableFrom, the lowest it can): the watch started over
// as a retained one instead, so the client must replace what it holds by
// the RetainedCount retained events that come first.
type CacheWatchStarted struct {
	RequestID      uint64 `msgpack:"request_id"`
	SubscriptionID uint64 `msgpack:"subscription_id"`
	Shard          uint32 `msgpack:"shard"`
	Shards         uint32 `msgpack:"shards"`
	Resume         uint64 `msgpack:"resume"`
	Resnapshot     bool   `msgpack:"resnapshot,omitempty"`
	ResumableFrom  uint64 `msgpack:"resumable_from,omitempty"`
	RetainedCount  uint64 `msgpack:"retained_count,omitempty"`
	QueueCapacity  int    `msgpack:"queue_capacity"`
}

func (*CacheWatch) Type() MsgType             { return TypeCacheWatch }
func (*CacheWatchStarted) Type() MsgType      { return TypeCacheWatchStarted }
func (m *CacheWatchStarted) AnswerTo() uint64 { return m.RequestID }

func newCacheWatchMessage(t MsgType) Message {
	switch t {
	case TypeCacheWatch:
		return &CacheWatch{}
	case TypeCacheWatchStarted:
		return &CacheWatchStarted{}
	}
	return nil
}

// WatchKind is what a watch event says happened to its key.
type WatchKind uint8

// The watch event kinds.
const (
	// WatchPut: the key was set to Value.
	WatchPut WatchKind = iota + 1
	// WatchDelete: the key was deleted (a delete, or a delete-if that
	// held).
	WatchDelete
	// WatchExpire: the key's TTL passed and the shard deleted it.
	WatchExpire
	// WatchCommitEvent: an atomic commit's event (Value), after the
	// commit's changes this watch sees; Key is empty.
	WatchCommitEvent
	// WatchSnapshotEnd: a retained snapshot (a retained watch's, or a
	// resnapshot's) is whole, even one of no key: a key the reader holds
	// that the snapshot did not name is absent. Flagged retained; Version
	// is the version the watch's changes start from; Key and Value are
	// empty. Sent only with FeatureCacheSnapshotEnd.
	WatchSnapshotEnd
	watchKindEnd
)

var watchKindNames = [...]string{"", "put", "delete", "expire", "commit", "snapshot_end"}

func (k WatchKind) String() string {
	if k == 0 || k >= watchKindEnd {
		return fmt.Sprintf("watch_kind(%d)", uint8(k))
	}
	return watchKindNames[k]
}

// The flags of a watch event.
const (
	// WatchFlagRetained marks a retained watch's snapshot: the key's
	// current value when the watch started, not a change.
	WatchFlagRetained uint8 = 1 << 0
	// WatchFlagCommit marks a change made by an atomic commit (every one
	// of its changes has the commit's version).
	WatchFlagCommit uint8 = 1 << 1
	watchFlagsKnown       = WatchFlagRetained | WatchFlagCommit
)

// CacheWatchEvent is one change of a watched key. Version is the offset
// of the record that made it (a retained event: the key's version).
type CacheWatchEvent struct {
	Kind    WatchKind
	Flags   uint8
	Version uint64
	Key     string
	Value   []byte
}

// Bounds a watch event's decoder enforces, the cache's own (a key of at
// most 1 KiB, a value or event of at most 1 MiB).
const (
	maxWatchKeyBytes   = 1024
	maxWatchValueBytes = 1 << 20
)

// ErrBadWatchEvent is returned for a watch event that does not decode.
var ErrBadWatchEvent = errors.New("wire: bad cache watch event")

// A watch event's layout: kind (1 byte), flags (1 byte), version (8
// bytes, big endian), key (uvarint length, bytes), value (uvarint length,
// bytes). Nothing may follow.

// AppendCacheWatchEvent appends ev's encoding to b.
func AppendCacheWatchEvent(b []byte, ev *CacheWatchEvent) []byte {
	b = append(b, byte(ev.Kind), ev.Flags)
	b = binary.BigEndian.AppendUint64(b, ev.Version)
	b = binary.AppendUvarint(b, uint64(len(ev.Key)))
	b = append(b, ev.Key...)
	b = binary.AppendUvarint(b, uint64(len(ev.Value)))
	return append(b, ev.Value...)
}

// DecodeCacheWatchEvent decodes one watch event. It never panics and
// allocates only the key; Value aliases b.
func DecodeCacheWatchEvent(b []byte) (CacheWatchEvent, error) {
	var ev CacheWatchEvent
	if len(b) < 10 {
		return ev, fmt.Errorf("%w: %d bytes", ErrBadWatchEvent, len(b))
	}
	ev.Kind, ev.Flags = WatchKind(b[0]), b[1]
	if ev.Kind == 0 || ev.Kind >= watchKindEnd || ev.Flags&^watchFlagsKnown != 0 {
		return CacheWatchEvent{}, fmt.Errorf("%w: kind %d, flags %#x", ErrBadWatchEvent, b[0], b[1])
	}
	ev.Version = binary.BigEndian.Uint64(b[2:])
	rest := b[10:]
	key, rest, ok := watchField(rest, maxWatchKeyBytes)
	if !ok {
		return CacheWatchEvent{}, fmt.Errorf("%w: key length", ErrBadWatchEvent)
	}
	value, rest, ok := watchField(rest, maxWatchValueBytes)
	if !ok || len(rest) != 0 {
		return CacheWatchEvent{}, fmt.Errorf("%w: value length, or trailing bytes", ErrBadWatchEvent)
	}
	if ev.Kind == WatchSnapshotEnd && (ev.Flags != WatchFlagRetained || len(key) != 0 || len(value) != 0) {
		return CacheWatchEvent{}, fmt.Errorf("%w: a snapshot end is flagged retained alone and has no key or value", ErrBadWatchEvent)
	}
	ev.Key, ev.Value = string(key), value
	return ev, nil
}

func watchField(b []byte, limit int) (field, rest []byte, ok bool) {
	n, w := binary.Uvarint(b)
	// A length in more bytes than it needs is refused, so an event has
	// one encoding.
	if w <= 0 || n > uint64(limit) || n > uint64(len(b)-w) || w != uvarintLen(n) {
		return nil, nil, false
	}
	end := w + int(n)
	return b[w:end:end], b[end:], true
}

func uvarintLen(n uint64) int {
	w := 1
	for ; n >= 0x80; n >>= 7 {
		w++
	}
	return w
}
