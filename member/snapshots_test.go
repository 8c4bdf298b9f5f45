package member

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/getfelix/felix-go/persistence"
	"github.com/getfelix/felix-go/replication"
)

func TestSnapshotRequestRoundTrip(t *testing.T) {
	want := snapshotRequest{ID: 7, Offset: 1 << 20, Horizon: 4096, Group: "t/ns/s/0@1", File: "00000000000000000064.log"}
	got, err := decodeSnapshotRequest(want.encode())
	if err != nil || got != want {
		t.Fatalf("decode(encode(%+v)) = %+v, %v", want, got, err)
	}
}

// TestSnapshotServiceServesOnlySegments: a request for anything but a
// segment file of a replica held here is refused, whatever its name.
func TestSnapshotServiceServesOnlySegments(t *testing.T) {
	dir := t.TempDir()
	seg := "00000000000000000000.log"
	if err := os.WriteFile(filepath.Join(dir, seg), []byte("batches"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "raft.state"), []byte("vote"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newSnapshots(nil)
	s.dirs.Store("g", dir)
	if got, refused := s.read(snapshotRequest{Group: "g", File: seg, Offset: 2}); string(got) != "tches" || refused != "" {
		t.Errorf("read from offset 2: %q (%s)", got, refused)
	}
	if got, refused := s.read(snapshotRequest{Group: "g", File: seg, Offset: 100}); refused != "" || len(got) != 0 {
		t.Errorf("read past the end: %q (%s), want an empty chunk", got, refused)
	}
	if got, refused := s.read(snapshotRequest{Group: "other", File: seg}); refused == "" {
		t.Errorf("a replica not here: %q, want refused", got)
	}
	for _, name := range []string{"raft.state", "../0/raft.state", "00000000000000000000.index"} {
		b := snapshotRequest{Group: "g", File: name}.encode()
		if _, err := decodeSnapshotRequest(b); !errors.Is(err, errBadSnapshotMessage) {
			t.Errorf("request for %q: %v, want refused", name, err)
		}
	}
}

func FuzzSnapshotRequest(f *testing.F) {
	f.Add(snapshotRequest{ID: 1, Group: "t/ns/s/0@1", File: "00000000000000000000.log"}.encode())
	f.Add([]byte{})
	f.Add(make([]byte, 26))
	f.Add(snapshotRequest{ID: 2, Horizon: 9, Group: "g", File: "00000000000000000000.log"}.encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeSnapshotRequest(b)
		if err != nil {
			return
		}
		if got, err := decodeSnapshotRequest(r.encode()); err != nil || got != r {
			t.Fatalf("%+v does not round-trip: %+v, %v", r, got, err)
		}
	})
}

// TestStagedCopyTakesTheLeaderHorizon: a follower's copy of a compacted
// leader's segments, installed, opens as a log compacted below the
// leader's horizon, holding exactly the leader's records: the floor
// travels with the segments.
func TestStagedCopyTakesTheLeaderHorizon(t *testing.T) {
	cfg := persistence.Config{SegmentBytes: 512, Fsync: persistence.FsyncOnCommit}
	leaderDir := t.TempDir()
	leader, err := persistence.Open(leaderDir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer leader.Close()
	for i := uint64(1); i <= 60; i++ {
		if _, err := leader.AppendEntry(persistence.EntryMeta{Index: i, Term: 2}, [][]byte{fmt.Appendf(nil, "record-%d", i)}, time.Now(), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := leader.Sync(); err != nil {
		t.Fatal(err)
	}
	c, err := leader.PrepareCompaction(40, func(off uint64, v []byte) ([]byte, bool, error) { return v, off%3 == 0, nil })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Commit(); err != nil {
		t.Fatal(err)
	}
	horizon := leader.CompactedBelow()
	if horizon == 0 {
		t.Fatal("the leader's log did not compact")
	}
	last, _ := leader.LastEntry()
	want := readRecords(t, leader)

	dir := filepath.Join(t.TempDir(), "0")
	staged := dir + replication.StagedSuffix
	if err := os.MkdirAll(staged, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range leader.SegmentFiles() {
		b, err := os.ReadFile(filepath.Join(leaderDir, f.Name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(staged, f.Name), b[:f.Size], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := finishStaged(staged, horizon, raftpb.SnapshotMetadata{Index: last.Index, Term: last.Term}, cfg); err != nil {
		t.Fatal(err)
	}
	if installed, err := replication.InstallStaged(dir); err != nil || !installed {
		t.Fatalf("InstallStaged: %v, %v", installed, err)
	}
	follower, err := persistence.Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer follower.Close()
	if got := follower.CompactedBelow(); got != horizon {
		t.Fatalf("the installed copy is compacted below %d, the leader's log below %d", got, horizon)
	}
	if got := readRecords(t, follower); !slices.Equal(got, want) {
		t.Fatalf("the installed copy holds %v, the leader %v", got, want)
	}
}

// readRecords lists a log's records as offset=value.
func readRecords(t *testing.T, l *persistence.Log) []string {
	t.Helper()
	var out []string
	for next := l.StartOffset(); next < l.NextOffset(); {
		page, err := l.Read(next, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Records {
			out = append(out, fmt.Sprintf("%d=%s", r.Offset, r.Value))
		}
		next = page.Next
	}
	return out
}

// TestSnapshotServiceServesOneGeneration: a chunk is served only of the
// generation of the files the snapshot named, the one compacted below its
// horizon: once a compaction commits, a copy that started before it is
// refused (and given up), one from the new snapshot is served; serving
// holds the replica's compactions back for a while.
func TestSnapshotServiceServesOneGeneration(t *testing.T) {
	dir := t.TempDir()
	l, err := persistence.Open(dir, persistence.Config{SegmentBytes: 512, Fsync: persistence.FsyncOnCommit})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := uint64(1); i <= 60; i++ {
		if _, err := l.AppendEntry(persistence.EntryMeta{Index: i, Term: 1}, [][]byte{fmt.Appendf(nil, "record-%d", i)}, time.Now(), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	s := newSnapshots(nil)
	s.dirs.Store("g", dir)
	if s.servedWithin("g", time.Hour) {
		t.Fatal("served before any chunk")
	}
	seg := l.SegmentFiles()[0]
	old, refused := s.read(snapshotRequest{Group: "g", File: seg.Name, Horizon: 0})
	if refused != "" || int64(len(old)) != seg.Size {
		t.Fatalf("a chunk of a log never compacted: %d bytes (%s), want %d", len(old), refused, seg.Size)
	}
	if !s.servedWithin("g", time.Hour) || s.servedWithin("other", time.Hour) {
		t.Fatal("a chunk served is not noted for its group alone")
	}
	c, err := l.PrepareCompaction(40, func(off uint64, v []byte) ([]byte, bool, error) { return v, off%2 == 0, nil })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Commit(); err != nil {
		t.Fatal(err)
	}
	if got, refused := s.read(snapshotRequest{Group: "g", File: seg.Name, Offset: 100, Horizon: 0}); refused == "" {
		t.Fatalf("the rest of a file compacted since the snapshot: %d bytes served, want refused", len(got))
	}
	now, refused := s.read(snapshotRequest{Group: "g", File: seg.Name, Horizon: l.CompactedBelow()})
	if refused != "" || len(now) == 0 || bytes.Equal(now, old) {
		t.Fatalf("a chunk of the new generation: %d bytes (%s), want the compacted file", len(now), refused)
	}
}
