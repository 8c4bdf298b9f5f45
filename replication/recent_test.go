package replication

import (
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// TestRecentEntriesStayWithinTheirBound: past maxRecentBytes the oldest
// entries go, and a range reaching below what is kept is not served.
func TestRecentEntriesStayWithinTheirBound(t *testing.T) {
	var r recentEntries
	data := make([]byte, 1<<20)
	for i := uint64(1); i <= 10; i++ {
		r.add([]raftpb.Entry{{Index: i, Term: 1, Data: data}})
	}
	// Past 4 MiB the oldest go down to 3 MiB: at entry 5 ([3, 5] stay),
	// at 7 ([5, 7]), at 9 ([7, 9]); then 10 joins.
	if r.bytes > maxRecentBytes || r.ents[0].Index != 7 || r.last() != 10 {
		t.Fatalf("kept [%d, %d], %d bytes; want [7, 10] within %d", r.ents[0].Index, r.last(), r.bytes, maxRecentBytes)
	}
	if _, ok := r.get(6, 8, noLimit); ok {
		t.Error("served a range starting below what is kept")
	}
	if got, ok := r.get(7, 11, 3<<20); !ok || len(got) != 2 {
		t.Errorf("get(7, 11) within 3 MiB: %d entries, %v; want 2 (raft's size rule)", len(got), ok)
	}
	r.dropThrough(8)
	if r.ents[0].Index != 9 || r.bytes != 2<<20 {
		t.Errorf("after dropThrough(8): first %d, %d bytes", r.ents[0].Index, r.bytes)
	}
	r.add([]raftpb.Entry{{Index: 20, Term: 2}}) // not following: starts over
	if len(r.ents) != 1 || r.ents[0].Index != 20 || r.bytes != 0 {
		t.Errorf("after a gap: %d entries from %d, %d bytes", len(r.ents), r.ents[0].Index, r.bytes)
	}
}

// BenchmarkStorageEntriesCommitted reads back the entry just appended, as
// raft does to apply it: from the recent entries, and from the log.
func BenchmarkStorageEntriesCommitted(b *testing.B) {
	for _, recent := range []bool{true, false} {
		name := "log"
		if recent {
			name = "recent"
		}
		b.Run(name, func(b *testing.B) {
			s := openTestStorage(b, newMemLog(), b.TempDir())
			records := make([][]byte, 64)
			for i := range records {
				records[i] = make([]byte, 128)
			}
			data, err := EncodeRecords(nil, Batch{Records: records})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for i := uint64(1); i <= uint64(b.N); i++ {
				if err := s.Append([]raftpb.Entry{{Index: i, Term: 1, Data: data}}); err != nil {
					b.Fatal(err)
				}
				if !recent {
					s.recent.reset()
				}
				if _, err := s.Entries(i, i+1, noLimit); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
