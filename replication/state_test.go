package replication

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

func TestStateRoundTrip(t *testing.T) {
	dir := t.TempDir()
	hs := raftpb.HardState{Term: 7, Vote: 2, Commit: 41}
	cs := raftpb.ConfState{Voters: []uint64{1, 2, 3}}
	if err := writeState(dir, hs, cs); err != nil {
		t.Fatal(err)
	}
	gotHS, gotCS, found, err := readState(dir)
	if err != nil || !found || !reflect.DeepEqual(gotHS, hs) || !reflect.DeepEqual(gotCS, cs) {
		t.Errorf("readState = %+v, %+v, found %v, %v; want %+v, %+v", gotHS, gotCS, found, err, hs, cs)
	}
	if _, err := os.Stat(filepath.Join(dir, stateTmpName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s is still there after a write: %v", stateTmpName, err)
	}
}

func TestStateMissingIsEmpty(t *testing.T) {
	hs, cs, found, err := readState(t.TempDir())
	if err != nil || found || !reflect.DeepEqual(hs, raftpb.HardState{}) || len(cs.Voters) != 0 {
		t.Errorf("readState of an empty dir = %+v, %+v, found %v, %v; want empty, not found", hs, cs, found, err)
	}
}

// TestStateLeftoverTmpIsIgnored: a crash before the rename leaves the
// temporary file, and the state is the one before it.
func TestStateLeftoverTmpIsIgnored(t *testing.T) {
	dir := t.TempDir()
	hs := raftpb.HardState{Term: 3, Vote: 1, Commit: 5}
	if err := writeState(dir, hs, raftpb.ConfState{}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, stateTmpName), []byte("half a write"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, _, _, err := readState(dir)
	if err != nil || got != hs {
		t.Errorf("readState with a leftover temporary file = %+v, %v; want %+v", got, err, hs)
	}
}

func TestStateDamageIsRefused(t *testing.T) {
	good, err := encodeState(raftpb.HardState{Term: 3, Vote: 1, Commit: 5}, raftpb.ConfState{Voters: []uint64{1}})
	if err != nil {
		t.Fatal(err)
	}
	flip := func(at int) []byte {
		b := append([]byte(nil), good...)
		b[at] ^= 0x01
		return b
	}
	tests := []struct {
		name string
		give []byte
	}{
		{"empty", nil},
		{"short header", good[:stateHeadLen-1]},
		{"bad magic", flip(0)},
		{"other version", flip(4)},
		{"body bit flip", flip(len(good) - 1)},
		{"truncated body", good[:len(good)-1]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, stateName), tt.give, 0o644); err != nil {
				t.Fatal(err)
			}
			_, _, _, err := readState(dir)
			var corrupt *ErrCorruptState
			if !errors.As(err, &corrupt) {
				t.Errorf("readState of %x = %v, want *ErrCorruptState", tt.give, err)
			}
		})
	}
}
