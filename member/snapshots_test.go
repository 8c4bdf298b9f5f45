package member

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestSnapshotRequestRoundTrip(t *testing.T) {
	want := snapshotRequest{ID: 7, Offset: 1 << 20, Group: "t/ns/s/0@1", File: "00000000000000000064.log"}
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
	if got := s.read(snapshotRequest{Group: "g", File: seg, Offset: 2}); string(got) != "tches" {
		t.Errorf("read from offset 2: %q", got)
	}
	if got := s.read(snapshotRequest{Group: "g", File: seg, Offset: 100}); got == nil || len(got) != 0 {
		t.Errorf("read past the end: %q, want an empty chunk", got)
	}
	if got := s.read(snapshotRequest{Group: "other", File: seg}); got != nil {
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
	f.Add(make([]byte, 18))
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
