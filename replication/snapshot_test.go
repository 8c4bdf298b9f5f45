package replication

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/getfelix/felix-go/persistence"
)

func TestSnapshotFilesRoundTrip(t *testing.T) {
	files := []persistence.SegmentFile{
		{Name: "00000000000000000000.log", Size: 4096},
		{Name: "00000000000000001000.log", Size: 17},
	}
	for _, horizon := range []uint64{0, 4000} {
		b, err := EncodeSnapshotFiles(files, horizon)
		if err != nil {
			t.Fatal(err)
		}
		got, h, err := DecodeSnapshotFiles(b)
		if err != nil || !slices.Equal(got, files) || h != horizon {
			t.Fatalf("DecodeSnapshotFiles: %v below %d, %v; want %v below %d", got, h, err, files, horizon)
		}
	}
	// A log never compacted encodes as before horizons travelled; any
	// other tail than a horizon is refused.
	plain, _ := EncodeSnapshotFiles(files, 0)
	withHorizon, _ := EncodeSnapshotFiles(files, 1)
	if len(withHorizon) != len(plain)+8 {
		t.Fatalf("a horizon took %d bytes, want 8", len(withHorizon)-len(plain))
	}
	for _, tail := range [][]byte{{1}, make([]byte, 8), make([]byte, 9)} {
		if _, _, err := DecodeSnapshotFiles(append(slices.Clone(plain), tail...)); !errors.Is(err, ErrBadSnapshot) {
			t.Errorf("files then %x: %v, want ErrBadSnapshot", tail, err)
		}
	}
}

func TestSnapshotFilesRefuseOtherNames(t *testing.T) {
	for _, name := range []string{"../../etc/passwd", "raft.state", "0000000000000000000a.log", "00000000000000000000.index", ""} {
		b, err := EncodeSnapshotFiles([]persistence.SegmentFile{{Name: name, Size: 1}}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := DecodeSnapshotFiles(b); !errors.Is(err, ErrBadSnapshot) {
			t.Errorf("%q: %v, want ErrBadSnapshot", name, err)
		}
	}
}

func FuzzDecodeSnapshotFiles(f *testing.F) {
	good, _ := EncodeSnapshotFiles([]persistence.SegmentFile{{Name: "00000000000000000000.log", Size: 9}}, 0)
	f.Add(good)
	compacted, _ := EncodeSnapshotFiles([]persistence.SegmentFile{{Name: "00000000000000000000.log", Size: 9}}, 7)
	f.Add(compacted)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		files, horizon, err := DecodeSnapshotFiles(b)
		if err != nil {
			return
		}
		again, err := EncodeSnapshotFiles(files, horizon)
		if err != nil || string(again) != string(b) {
			t.Fatalf("decoded %v does not encode back to the input", files)
		}
	})
}

// stage makes a replica directory with a raft.state and a complete staged
// copy beside it.
func stage(t *testing.T, hs raftpb.HardState, meta raftpb.SnapshotMetadata) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "0")
	for _, d := range []string{dir, dir + StagedSuffix} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeState(dir, hs, raftpb.ConfState{Voters: []uint64{1, 2, 3}}); err != nil {
		t.Fatal(err)
	}
	for path, body := range map[string]string{
		filepath.Join(dir, "old.log"): "old", filepath.Join(dir, replicaIDName): "3",
		filepath.Join(dir+StagedSuffix, "new.log"): "new",
	} {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := WriteStagedMeta(dir+StagedSuffix, meta); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestInstallStagedKeepsTheVote: the installed raft.state commits the
// snapshot's index with its ConfState and keeps the replica's own term and
// vote when they are later than the snapshot's (it must never vote twice in
// a term), and the replica id; the old log is gone.
func TestInstallStagedKeepsTheVote(t *testing.T) {
	meta := raftpb.SnapshotMetadata{Index: 40, Term: 3, ConfState: raftpb.ConfState{Voters: []uint64{1, 2, 4}}}
	dir := stage(t, raftpb.HardState{Term: 5, Vote: 2, Commit: 7}, meta)
	installed, err := InstallStaged(dir)
	if err != nil || !installed {
		t.Fatalf("InstallStaged: %v, %v", installed, err)
	}
	hs, cs, _, err := readState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if hs != (raftpb.HardState{Term: 5, Vote: 2, Commit: 40}) || !slices.Equal(cs.Voters, []uint64{1, 2, 4}) {
		t.Errorf("raft.state %v %v", hs, cs)
	}
	for path, want := range map[string]bool{"new.log": true, "old.log": false, replicaIDName: true, stagedMetaName: false} {
		if _, err := os.Stat(filepath.Join(dir, path)); (err == nil) != want {
			t.Errorf("%s present: %v, want %v", path, err == nil, want)
		}
	}
	for _, gone := range []string{dir + StagedSuffix, dir + replacedSuffix} {
		if _, err := os.Stat(gone); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind: %v", gone, err)
		}
	}
}

// TestInstallStagedAfterACrash: a crash after the old log was moved aside
// and before the copy took its place is finished on the next start, with
// the moved log's term and vote.
func TestInstallStagedAfterACrash(t *testing.T) {
	meta := raftpb.SnapshotMetadata{Index: 40, Term: 6, ConfState: raftpb.ConfState{Voters: []uint64{1, 2, 3}}}
	dir := stage(t, raftpb.HardState{Term: 5, Vote: 2, Commit: 7}, meta)
	if err := os.Rename(dir, dir+replacedSuffix); err != nil {
		t.Fatal(err)
	}
	if installed, err := InstallStaged(dir); err != nil || !installed {
		t.Fatalf("InstallStaged: %v, %v", installed, err)
	}
	hs, _, _, err := readState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if hs != (raftpb.HardState{Term: 6, Commit: 40}) {
		t.Errorf("raft.state %v: want the snapshot's later term, no vote, its index committed", hs)
	}
	if _, err := os.Stat(filepath.Join(dir, "new.log")); err != nil {
		t.Error(err)
	}
}

// TestInstallStagedDropsAnIncompleteCopy: a copy without its metadata (the
// download stopped) is removed and the log stays.
func TestInstallStagedDropsAnIncompleteCopy(t *testing.T) {
	dir := stage(t, raftpb.HardState{Term: 5, Vote: 2, Commit: 7}, raftpb.SnapshotMetadata{Index: 9, Term: 1})
	if err := os.Remove(filepath.Join(dir+StagedSuffix, stagedMetaName)); err != nil {
		t.Fatal(err)
	}
	if installed, err := InstallStaged(dir); err != nil || installed {
		t.Fatalf("InstallStaged: %v, %v", installed, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "old.log")); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(dir + StagedSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("incomplete copy left: %v", err)
	}
}
