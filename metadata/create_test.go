package metadata

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestOpenRemovesAStaleNewFile: a metadata.db.new left by a create that
// failed (a full disk) or crashed is not a store: Open makes a new one in
// its place, renames it to metadata.db, and leaves no .new behind.
func TestOpenRemovesAStaleNewFile(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, FileName+".new")
	if err := os.WriteFile(stale, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir)
	if err != nil {
		t.Fatalf("open beside a part-written %s: %v", stale, err)
	}
	defer s.Close()
	if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s after open: %v, want it gone", stale, err)
	}
	d := StreamDef{Tenant: "t", Namespace: "n", Stream: "s", Shards: 1}
	if err := s.PutStream(d); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Streams(); err != nil || len(got) != 1 {
		t.Fatalf("streams = %+v, %v; want the one put", got, err)
	}
}
