package wire

import (
	"bytes"
	"errors"
	"testing"
)

func init() {
	v := uint64(41)
	allMessages = append(allMessages,
		&CacheWatch{RequestID: 11, Tenant: "t", Namespace: "ns", Cache: "c", Key: "user/", Prefix: true, Shard: 2, FromVersion: &v, QueueCapacity: 64},
		&CacheWatch{RequestID: 12, Tenant: "t", Namespace: "ns", Cache: "c", Key: "k", Retained: true},
		&CacheWatchStarted{RequestID: 11, SubscriptionID: 5, Shard: 2, Shards: 4, Resume: 41, Resnapshot: true, ResumableFrom: 50, RetainedCount: 3, QueueCapacity: 1024},
		&CacheWatch{}, &CacheWatchStarted{},
	)
	allTypes = append(allTypes, TypeCacheWatch, TypeCacheWatchStarted)
}

var watchEventSeeds = []CacheWatchEvent{
	{Kind: WatchPut, Version: 7, Key: "user/1", Value: []byte("ada")},
	{Kind: WatchDelete, Version: 8, Key: "user/1"},
	{Kind: WatchExpire, Version: 1 << 40, Key: "session/x"},
	{Kind: WatchPut, Flags: WatchFlagRetained, Version: 3, Key: "k", Value: []byte{}},
	{Kind: WatchPut, Flags: WatchFlagCommit, Version: 9, Key: "order/1", Value: []byte("paid")},
	{Kind: WatchCommitEvent, Flags: WatchFlagCommit, Version: 9, Value: []byte("event")},
	{Kind: WatchSnapshotEnd, Flags: WatchFlagRetained, Version: 10},
}

func TestCacheWatchEventRoundTrip(t *testing.T) {
	for _, want := range watchEventSeeds {
		b := AppendCacheWatchEvent(nil, &want)
		got, err := DecodeCacheWatchEvent(b)
		if err != nil {
			t.Fatalf("decode %+v: %v", want, err)
		}
		if got.Kind != want.Kind || got.Flags != want.Flags || got.Version != want.Version || got.Key != want.Key || !bytes.Equal(got.Value, want.Value) {
			t.Fatalf("round trip of %+v gave %+v", want, got)
		}
	}
}

func TestCacheWatchEventRefusesBadInput(t *testing.T) {
	good := AppendCacheWatchEvent(nil, &watchEventSeeds[0])
	tests := []struct {
		name string
		give []byte
	}{
		{"empty", nil},
		{"short", good[:9]},
		{"kind zero", append([]byte{0}, good[1:]...)},
		{"kind past the end", append([]byte{byte(watchKindEnd)}, good[1:]...)},
		{"unknown flag", append([]byte{good[0], 0x80}, good[2:]...)},
		{"value cut", good[:len(good)-1]},
		{"trailing byte", append(append([]byte(nil), good...), 0)},
		{"key length past the bound", append(append([]byte(nil), good[:10]...), 0x81, 0x08)},
		{"snapshot end with a key", AppendCacheWatchEvent(nil, &CacheWatchEvent{Kind: WatchSnapshotEnd, Flags: WatchFlagRetained, Key: "k"})},
		{"snapshot end with a value", AppendCacheWatchEvent(nil, &CacheWatchEvent{Kind: WatchSnapshotEnd, Flags: WatchFlagRetained, Value: []byte("v")})},
		{"snapshot end not retained", AppendCacheWatchEvent(nil, &CacheWatchEvent{Kind: WatchSnapshotEnd})},
		{"snapshot end of a commit", AppendCacheWatchEvent(nil, &CacheWatchEvent{Kind: WatchSnapshotEnd, Flags: WatchFlagRetained | WatchFlagCommit})},
	}
	for _, tt := range tests {
		if _, err := DecodeCacheWatchEvent(tt.give); !errors.Is(err, ErrBadWatchEvent) {
			t.Errorf("%s: got %v, want ErrBadWatchEvent", tt.name, err)
		}
	}
}

// FuzzDecodeCacheWatchEvent: the decoder never panics, and whatever it
// accepts encodes back to the same bytes (one reading per event).
func FuzzDecodeCacheWatchEvent(f *testing.F) {
	for _, ev := range watchEventSeeds {
		f.Add(AppendCacheWatchEvent(nil, &ev))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := DecodeCacheWatchEvent(b)
		if err != nil {
			return
		}
		if again := AppendCacheWatchEvent(nil, &ev); !bytes.Equal(again, b) {
			t.Fatalf("decoded %x as %+v, which encodes as %x", b, ev, again)
		}
	})
}
