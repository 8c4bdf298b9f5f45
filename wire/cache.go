package wire

// Caches: a cache is a stream whose records are key writes (its shards
// keep a key index over them); these control messages create, write and
// read one. A key's version is the log offset of the write that set it.
// Every request names the cache by tenant, namespace and cache, and a key
// request goes to the key's shard (the streams' routing, so a client may
// route itself); cache_list, which has no key, names its shard.

const (
	TypeCacheCreate   MsgType = "cache_create"
	TypeCacheDescribe MsgType = "cache_describe"
	TypeCacheInfo     MsgType = "cache_info"
	TypeCachePut      MsgType = "cache_put"
	TypeCacheDelete   MsgType = "cache_delete"
	TypeCacheResult   MsgType = "cache_result"
	TypeCacheGet      MsgType = "cache_get"
	TypeCacheValue    MsgType = "cache_value"
	TypeCacheList     MsgType = "cache_list"
	TypeCacheKeys     MsgType = "cache_keys"
	TypeCounterAdd    MsgType = "counter_add"
	TypeCounterGet    MsgType = "counter_get"
	TypeCounterValue  MsgType = "counter_value"
	TypeCacheCommit   MsgType = "cache_commit"
	TypeStateGet      MsgType = "state_get"
	TypeStateValues   MsgType = "state_values"

	// FeatureCache: every message above. (The reference's CACHE_DELETE
	// bit: its first cache feature.)
	FeatureCache uint32 = 0x0000_0004
)

// CacheCreate creates a cache (a stream of kind cache); creating one that
// exists with the same settings succeeds. Answered by CacheInfo.
type CacheCreate struct {
	RequestID uint64 `msgpack:"request_id"`
	Tenant    string `msgpack:"tenant"`
	Namespace string `msgpack:"namespace"`
	Cache     string `msgpack:"cache"`
	Shards    uint32 `msgpack:"shards"`
	Durable   bool   `msgpack:"durable,omitempty"`
	Replicas  uint32 `msgpack:"replicas,omitempty"`
	// TTLMS is the expiry of a put that names none; 0: none.
	TTLMS int64 `msgpack:"ttl_ms,omitempty"`
	// History is how many changes per key compaction keeps (1 to 64);
	// 0, or absent from an older client, takes 1.
	History uint32 `msgpack:"history,omitempty"`
}

// CacheDescribe asks for a cache's definition; answered by CacheInfo.
type CacheDescribe struct {
	RequestID uint64 `msgpack:"request_id"`
	Tenant    string `msgpack:"tenant"`
	Namespace string `msgpack:"namespace"`
	Cache     string `msgpack:"cache"`
}

// CacheInfo is a cache's definition.
type CacheInfo struct {
	RequestID uint64 `msgpack:"request_id" json:"-"`
	Tenant    string `msgpack:"tenant" json:"tenant"`
	Namespace string `msgpack:"namespace" json:"namespace"`
	Cache     string `msgpack:"cache" json:"cache"`
	Shards    uint32 `msgpack:"shards" json:"shards"`
	Routing   string `msgpack:"routing" json:"routing"`
	Durable   bool   `msgpack:"durable" json:"durable"`
	Replicas  uint32 `msgpack:"replicas" json:"replicas"`
	TTLMS     int64  `msgpack:"ttl_ms" json:"ttl_ms"`
	History   uint32 `msgpack:"history,omitempty" json:"history"`
	// Floors are each shard's lowest version a watch may resume from,
	// when the broker could ask every shard.
	Floors []uint64 `msgpack:"floors,omitempty" json:"floors,omitempty"`
}

// CachePut sets a key. IfAbsent or IfVersion make it conditional (judged
// when the write applies); TTLMS replaces the cache's TTL for this put.
// Answered by CacheResult.
type CachePut struct {
	RequestID uint64  `msgpack:"request_id"`
	Tenant    string  `msgpack:"tenant"`
	Namespace string  `msgpack:"namespace"`
	Cache     string  `msgpack:"cache"`
	Key       string  `msgpack:"key"`
	Value     []byte  `msgpack:"value"`
	TTLMS     int64   `msgpack:"ttl_ms,omitempty"`
	IfAbsent  bool    `msgpack:"if_absent,omitempty"`
	IfVersion *uint64 `msgpack:"if_version,omitempty"`
}

// CacheDelete deletes a key, if IfVersion is set only at that version.
// Answered by CacheResult, with the value removed.
type CacheDelete struct {
	RequestID uint64  `msgpack:"request_id"`
	Tenant    string  `msgpack:"tenant"`
	Namespace string  `msgpack:"namespace"`
	Cache     string  `msgpack:"cache"`
	Key       string  `msgpack:"key"`
	IfVersion *uint64 `msgpack:"if_version,omitempty"`
}

// CacheResult answers a write. Applied says whether it changed anything;
// when it did not, Reason says why (condition_failed, not_found, full,
// overflow) and Version is the key's version as it stands (when Present).
// Prev is the value a delete removed or a put replaced (when HadPrev).
type CacheResult struct {
	RequestID uint64 `msgpack:"request_id"`
	Applied   bool   `msgpack:"applied"`
	Reason    string `msgpack:"reason,omitempty"`
	Version   uint64 `msgpack:"version"`
	Present   bool   `msgpack:"present,omitempty"`
	HadPrev   bool   `msgpack:"had_prev,omitempty"`
	Prev      []byte `msgpack:"prev,omitempty"`
}

// CacheGet reads a key; answered by CacheValue.
type CacheGet struct {
	RequestID uint64 `msgpack:"request_id"`
	Tenant    string `msgpack:"tenant"`
	Namespace string `msgpack:"namespace"`
	Cache     string `msgpack:"cache"`
	Key       string `msgpack:"key"`
}

// CacheValue answers CacheGet: the key's value and version when Found;
// ExpiresMS is its expiry (unix milliseconds), 0 for none.
type CacheValue struct {
	RequestID uint64 `msgpack:"request_id" json:"-"`
	Found     bool   `msgpack:"found" json:"found"`
	Key       string `msgpack:"key" json:"key"`
	Value     []byte `msgpack:"value,omitempty" json:"value,omitempty"`
	Version   uint64 `msgpack:"version" json:"version"`
	ExpiresMS int64  `msgpack:"expires_ms,omitempty" json:"expires_ms,omitempty"`
}

// CacheList lists one shard's keys by prefix, in key order, after After,
// at most Limit (0 or past the broker's bound: the bound). Answered by
// CacheKeys.
type CacheList struct {
	RequestID uint64 `msgpack:"request_id"`
	Tenant    string `msgpack:"tenant"`
	Namespace string `msgpack:"namespace"`
	Cache     string `msgpack:"cache"`
	Shard     uint32 `msgpack:"shard"`
	Prefix    string `msgpack:"prefix,omitempty"`
	After     string `msgpack:"after,omitempty"`
	Limit     uint32 `msgpack:"limit,omitempty"`
}

// CacheKeys answers CacheList: Next is the After of the next page, ""
// when the shard has no more.
type CacheKeys struct {
	RequestID uint64       `msgpack:"request_id"`
	Entries   []CacheValue `msgpack:"entries"`
	Next      string       `msgpack:"next,omitempty"`
}

// CounterAdd adds Delta to a counter; answered by CounterValue with the
// total. At least once: a retried add that had applied counts twice.
type CounterAdd struct {
	RequestID uint64 `msgpack:"request_id"`
	Tenant    string `msgpack:"tenant"`
	Namespace string `msgpack:"namespace"`
	Cache     string `msgpack:"cache"`
	Key       string `msgpack:"key"`
	Delta     int64  `msgpack:"delta"`
}

// CounterGet reads a counter; answered by CounterValue.
type CounterGet struct {
	RequestID uint64 `msgpack:"request_id"`
	Tenant    string `msgpack:"tenant"`
	Namespace string `msgpack:"namespace"`
	Cache     string `msgpack:"cache"`
	Key       string `msgpack:"key"`
}

// CounterValue is a counter's total and the offset of the add that set
// it (Found false: never added to).
type CounterValue struct {
	RequestID uint64 `msgpack:"request_id" json:"-"`
	Found     bool   `msgpack:"found" json:"found"`
	Value     int64  `msgpack:"value" json:"value"`
	Version   uint64 `msgpack:"version" json:"version"`
}

// CacheCommit writes Event and Ops as one record on Key's shard: every op's
// key must route to that shard. Answered by CacheResult (Version is the
// commit's offset).
type CacheCommit struct {
	RequestID uint64          `msgpack:"request_id"`
	Tenant    string          `msgpack:"tenant"`
	Namespace string          `msgpack:"namespace"`
	Cache     string          `msgpack:"cache"`
	Key       string          `msgpack:"key"`
	Event     []byte          `msgpack:"event,omitempty"`
	Ops       []CacheCommitOp `msgpack:"ops"`
}

// CacheCommitOp is one put (with its TTL) or delete of a commit.
type CacheCommitOp struct {
	Key    string `msgpack:"key"`
	Value  []byte `msgpack:"value,omitempty"`
	Delete bool   `msgpack:"delete,omitempty"`
	TTLMS  int64  `msgpack:"ttl_ms,omitempty"`
}

// StateGet reads keys of one shard (all routing there) as of one applied
// offset; answered by StateValues.
type StateGet struct {
	RequestID uint64   `msgpack:"request_id"`
	Tenant    string   `msgpack:"tenant"`
	Namespace string   `msgpack:"namespace"`
	Cache     string   `msgpack:"cache"`
	Keys      []string `msgpack:"keys"`
}

// StateValues answers StateGet, Values in the order asked.
type StateValues struct {
	RequestID uint64       `msgpack:"request_id"`
	Applied   uint64       `msgpack:"applied"`
	Values    []CacheValue `msgpack:"values"`
}

func (*CacheCreate) Type() MsgType   { return TypeCacheCreate }
func (*CacheDescribe) Type() MsgType { return TypeCacheDescribe }
func (*CacheInfo) Type() MsgType     { return TypeCacheInfo }
func (*CachePut) Type() MsgType      { return TypeCachePut }
func (*CacheDelete) Type() MsgType   { return TypeCacheDelete }
func (*CacheResult) Type() MsgType   { return TypeCacheResult }
func (*CacheGet) Type() MsgType      { return TypeCacheGet }
func (*CacheValue) Type() MsgType    { return TypeCacheValue }
func (*CacheList) Type() MsgType     { return TypeCacheList }
func (*CacheKeys) Type() MsgType     { return TypeCacheKeys }
func (*CounterAdd) Type() MsgType    { return TypeCounterAdd }
func (*CounterGet) Type() MsgType    { return TypeCounterGet }
func (*CounterValue) Type() MsgType  { return TypeCounterValue }
func (*CacheCommit) Type() MsgType   { return TypeCacheCommit }
func (*StateGet) Type() MsgType      { return TypeStateGet }
func (*StateValues) Type() MsgType   { return TypeStateValues }

func (m *CacheInfo) AnswerTo() uint64    { return m.RequestID }
func (m *CacheResult) AnswerTo() uint64  { return m.RequestID }
func (m *CacheValue) AnswerTo() uint64   { return m.RequestID }
func (m *CacheKeys) AnswerTo() uint64    { return m.RequestID }
func (m *CounterValue) AnswerTo() uint64 { return m.RequestID }
func (m *StateValues) AnswerTo() uint64  { return m.RequestID }

// newCacheMessage is newMessage for the cache's types, nil for others.
func newCacheMessage(t MsgType) Message {
	switch t {
	case TypeCacheCreate:
		return &CacheCreate{}
	case TypeCacheDescribe:
		return &CacheDescribe{}
	case TypeCacheInfo:
		return &CacheInfo{}
	case TypeCachePut:
		return &CachePut{}
	case TypeCacheDelete:
		return &CacheDelete{}
	case TypeCacheResult:
		return &CacheResult{}
	case TypeCacheGet:
		return &CacheGet{}
	case TypeCacheValue:
		return &CacheValue{}
	case TypeCacheList:
		return &CacheList{}
	case TypeCacheKeys:
		return &CacheKeys{}
	case TypeCounterAdd:
		return &CounterAdd{}
	case TypeCounterGet:
		return &CounterGet{}
	case TypeCounterValue:
		return &CounterValue{}
	case TypeCacheCommit:
		return &CacheCommit{}
	case TypeStateGet:
		return &StateGet{}
	case TypeStateValues:
		return &StateValues{}
	}
	return newCacheWatchMessage(t) // cachewatch.go
}
