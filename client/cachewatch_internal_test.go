package client

import (
	"testing"

	"github.com/getfelix/felix-go/wire"
)

// TestWatchPositionAdvances: a shard's resume version moves past each
// change returned; inside a commit it stays at the commit's version and
// counts the changes returned (what a resume there skips); the commit's
// event, and a retained event, move it as they should.
func TestWatchPositionAdvances(t *testing.T) {
	pos := &shardPosition{resume: 5, retainedDue: 1}
	steps := []struct {
		give       WatchEvent
		wantResume uint64
		wantSkip   int
	}{
		{WatchEvent{Kind: wire.WatchPut, Version: 3, Retained: true}, 5, 0},
		{WatchEvent{Kind: wire.WatchPut, Version: 5}, 6, 0},
		{WatchEvent{Kind: wire.WatchPut, Version: 8, Commit: true}, 8, 1},
		{WatchEvent{Kind: wire.WatchDelete, Version: 8, Commit: true}, 8, 2},
		{WatchEvent{Kind: wire.WatchCommitEvent, Version: 8, Commit: true}, 9, 0},
		{WatchEvent{Kind: wire.WatchExpire, Version: 12}, 13, 0},
	}
	for i, s := range steps {
		ev := s.give
		pos.advance(&ev)
		if pos.resume != s.wantResume || pos.skip != s.wantSkip {
			t.Fatalf("step %d (%+v): resume %d skip %d; want %d, %d", i, s.give, pos.resume, pos.skip, s.wantResume, s.wantSkip)
		}
	}
	if pos.retainedDue != 0 {
		t.Fatalf("retained still due: %d; want 0 after the snapshot's one event", pos.retainedDue)
	}
}

// TestWatchSnapshotEndCompletesTheSnapshot: a snapshot's end leaves
// nothing of it due (a lag after it resumes from a version, not retained
// again) and moves no resume version; it carries the resnapshot mark.
func TestWatchSnapshotEndCompletesTheSnapshot(t *testing.T) {
	pos := &shardPosition{resume: 9, retainedDue: 3, resnapshot: true}
	key := WatchEvent{Kind: wire.WatchPut, Version: 4, Retained: true}
	pos.advance(&key)
	end := WatchEvent{Kind: wire.WatchSnapshotEnd, Version: 9, Retained: true}
	pos.advance(&end)
	if pos.retainedDue != 0 || pos.retainedSeen != 1 || pos.resume != 9 {
		t.Fatalf("after the snapshot's end: due %d, seen %d, resume %d; want 0, 1, 9", pos.retainedDue, pos.retainedSeen, pos.resume)
	}
	if !key.Resnapshot || !end.Resnapshot {
		t.Fatalf("resnapshot marks: key %v, end %v; want both", key.Resnapshot, end.Resnapshot)
	}
}
