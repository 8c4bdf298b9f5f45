package wire

import (
	"errors"
	"testing"
)

// cacheMessages join allMessages (and so the round trips and the fuzz
// seeds): one populated and one zero value of each cache message.
var cacheMessages = []Message{
	&CacheCreate{RequestID: 1, Tenant: "t", Namespace: "ns", Cache: "c", Shards: 4, Durable: true, Replicas: 3, TTLMS: 60000, History: 4},
	&CacheDescribe{RequestID: 2, Tenant: "t", Namespace: "ns", Cache: "c"},
	&CacheInfo{RequestID: 2, Tenant: "t", Namespace: "ns", Cache: "c", Shards: 4, Routing: "jump", Durable: true, Replicas: 3, TTLMS: 5, History: 4, Floors: []uint64{0, 17, 1 << 40, 3}},
	&CachePut{RequestID: 3, Tenant: "t", Namespace: "ns", Cache: "c", Key: "k", Value: []byte("v"), TTLMS: 10, IfAbsent: true},
	&CachePut{RequestID: 3, Tenant: "t", Namespace: "ns", Cache: "c", Key: "k", Value: []byte{}, IfVersion: new(uint64)},
	&CacheDelete{RequestID: 4, Tenant: "t", Namespace: "ns", Cache: "c", Key: "k", IfVersion: new(uint64)},
	&CacheResult{RequestID: 4, Applied: false, Reason: "condition_failed", Version: 7, Present: true, HadPrev: true, Prev: []byte("old")},
	&CacheGet{RequestID: 5, Tenant: "t", Namespace: "ns", Cache: "c", Key: "k"},
	&CacheValue{RequestID: 5, Found: true, Key: "k", Value: []byte("v"), Version: 9, ExpiresMS: 1700000000000},
	&CacheList{RequestID: 6, Tenant: "t", Namespace: "ns", Cache: "c", Shard: 2, Prefix: "user/", After: "user/1", Limit: 10},
	&CacheKeys{RequestID: 6, Entries: []CacheValue{{Found: true, Key: "user/2", Value: []byte("x"), Version: 3}}, Next: "user/2"},
	&CounterAdd{RequestID: 7, Tenant: "t", Namespace: "ns", Cache: "c", Key: "n", Delta: -3},
	&CounterGet{RequestID: 8, Tenant: "t", Namespace: "ns", Cache: "c", Key: "n"},
	&CounterValue{RequestID: 8, Found: true, Value: -3, Version: 11},
	&CacheCommit{RequestID: 9, Tenant: "t", Namespace: "ns", Cache: "c", Key: "order/1", Event: []byte("paid"), Ops: []CacheCommitOp{{Key: "order/1", Value: []byte("paid"), TTLMS: 5}, {Key: "cart/1", Delete: true}}},
	&StateGet{RequestID: 10, Tenant: "t", Namespace: "ns", Cache: "c", Keys: []string{"a", "b"}},
	&StateValues{RequestID: 10, Applied: 12, Values: []CacheValue{{Found: true, Key: "a", Value: []byte("1"), Version: 12}, {Key: "b"}}},
	&CachePut{}, &CacheResult{}, &CacheKeys{}, &CacheCommit{}, &StateValues{},
}

var cacheTypes = []MsgType{
	TypeCacheCreate, TypeCacheDescribe, TypeCacheInfo, TypeCachePut, TypeCacheDelete, TypeCacheResult,
	TypeCacheGet, TypeCacheValue, TypeCacheList, TypeCacheKeys, TypeCounterAdd, TypeCounterGet,
	TypeCounterValue, TypeCacheCommit, TypeStateGet, TypeStateValues,
}

func init() {
	allMessages = append(allMessages, cacheMessages...)
	allTypes = append(allTypes, cacheTypes...)
}

// FuzzDecodeCacheMessage runs the control message checks from seeds of
// the cache messages only, so the fuzzer starts where they are.
func FuzzDecodeCacheMessage(f *testing.F) {
	for _, m := range cacheMessages {
		frame, err := AppendMessage(nil, m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(frame[HeaderLen:])
	}
	f.Fuzz(checkMessage)
}

// TestCacheWriteSizeCap: a cache write may carry a value past the 64 KiB
// every other control message is held to, up to MaxCacheWriteBytes; any
// other message that large is refused, as is a cache write past its cap.
func TestCacheWriteSizeCap(t *testing.T) {
	payload := func(m Message) []byte {
		b, err := AppendMessage(nil, m)
		if err != nil {
			t.Fatal(err)
		}
		return b[HeaderLen:]
	}
	big := make([]byte, 1<<20)
	put := &CachePut{RequestID: 7, Tenant: "t", Namespace: "n", Cache: "c", Key: "k", Value: big}
	m, err := DecodeMessage(payload(put))
	if got, ok := m.(*CachePut); err != nil || !ok || got.RequestID != 7 || len(got.Value) != len(big) {
		t.Fatalf("a 1 MiB cache put: %T, %v", m, err)
	}
	if MaxRequestBytes(put) != MaxCacheWriteBytes || MaxRequestBytes(&StreamGet{}) != MaxControlBytes {
		t.Fatal("MaxRequestBytes does not give cache writes their own cap")
	}
	other := &StreamCreate{RequestID: 8, Tenant: string(big[:MaxControlBytes])}
	if _, err := DecodeMessage(payload(other)); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("a stream_create past 64 KiB: %v; want frame too large", err)
	}
	put.Value = make([]byte, MaxCacheWriteBytes)
	if _, err := DecodeMessage(payload(put)); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("a cache put past MaxCacheWriteBytes: %v; want frame too large", err)
	}
}
