package member

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/getfelix/felix-go/persistence"
	"github.com/getfelix/felix-go/replication"
	"github.com/getfelix/felix-go/streams"
)

// A replica behind its leader's compaction point (retention removed what
// it lacks, or it is more than snapshotCatchUpEntries behind) catches up
// from the leader's segments rather than entry by entry: raft's snapshot
// names the leader's segment files and the horizon its log was compacted
// below (replication.Storage.Snapshot), and the follower copies their
// complete batches over the peer link, chunk by chunk, into a staged
// directory beside its log, which takes the leader's horizon. It checks the copy by
// opening it as a log cut at the snapshot's entry, marks it complete, and
// stops its shard; the replica starts again on the next placement round,
// and replication.InstallStaged swaps the copy in before the log opens.
//
// Every member serves the segment files of the replicas it holds: a
// request names the replica group, a segment file (only a segment's name
// is accepted), an offset and the horizon the snapshot's log was compacted
// below, and the answer is up to snapshotChunk bytes from there. A cache's
// compaction swaps segment files for their compacted copies; the horizon
// names a generation of the files (it rises with every compaction, and is
// written before a swap starts), so a chunk is served only if the log's
// horizon is the snapshot's both before and after it is read: a copy never
// takes the head of one generation of a file and the tail of another, or
// files of two generations. One that meets a compaction is refused and
// given up, and the next snapshot names the new files. So that a copy is
// not refused over and over, the replica commits no compaction while a
// copy may be under way (snapshotCopyHold). The follower asks for one chunk at a time and asks again
// after snapshotChunkWait; past snapshotChunkTries it gives up, and the
// leader's next snapshot starts a new copy.

// Peer link groups of the snapshot service, one per member: no replica
// group is named like them (those hold a '/').
const (
	snapshotRequestGroup = "felix.snapshot.request"
	snapshotAnswerGroup  = "felix.snapshot.answer"
)

const (
	// snapshotChunk is the most one answer carries; far below the peer
	// link's frame limit, and small enough that the link's queue to a
	// member does not hold raft's heartbeats back for long.
	snapshotChunk = 256 << 10
	// snapshotServers bounds the chunks a member reads and answers at
	// once; a request beyond them is dropped, and asked again.
	snapshotServers   = 4
	snapshotChunkWait = 2 * time.Second
	// snapshotChunkTries is how many times a chunk is asked for before
	// the copy is given up (the leader died or lost the file to
	// retention).
	snapshotChunkTries = 3
	// snapshotCatchUpEntries is how far behind its applied index a
	// replica keeps serving entries: a follower further behind is sent a
	// snapshot. 10 000 raft entries are up to 2.5 million records at the
	// shard's batches of 256.
	snapshotCatchUpEntries = 10_000
	// snapshotCopyHold is how long after a snapshot went out, or a chunk
	// was served, a replica commits no compaction: a follower that
	// hears nothing for that long gives its copy up.
	snapshotCopyHold = snapshotChunkTries * snapshotChunkWait
)

// snapshots is a member's snapshot service.
type snapshots struct {
	m       *Member
	dirs    sync.Map // replica group → the log directory of its replica here
	serving chan struct{}
	nextID  atomic.Uint64
	mu      sync.Mutex
	waiting map[uint64]chan []byte // by request id: the copy waiting for its answer
	served  sync.Map               // replica group → *atomic.Int64, unix ns of the last chunk served
}

// servedWithin says a chunk of the group's files was served within d.
func (s *snapshots) servedWithin(group string, d time.Duration) bool {
	at, ok := s.served.Load(group)
	return ok && time.Since(time.Unix(0, at.(*atomic.Int64).Load())) < d
}

func (s *snapshots) noteServed(group string) {
	at, _ := s.served.LoadOrStore(group, new(atomic.Int64))
	at.(*atomic.Int64).Store(time.Now().UnixNano())
}

func newSnapshots(m *Member) *snapshots {
	return &snapshots{m: m, serving: make(chan struct{}, snapshotServers), waiting: map[uint64]chan []byte{}}
}

// register puts the service on the link.
func (s *snapshots) register(p *Peers) error {
	if _, err := p.Register(snapshotRequestGroup, s.serve); err != nil {
		return err
	}
	_, err := p.Register(snapshotAnswerGroup, s.answer)
	return err
}

// snapshotRequest asks for a chunk of one of a replica's segment files, of
// the generation compacted below Horizon (0: never compacted).
type snapshotRequest struct {
	ID      uint64
	Offset  int64
	Horizon uint64
	Group   string // the replica group
	File    string // a segment file name
}

func (r snapshotRequest) encode() []byte {
	b := binary.BigEndian.AppendUint64(nil, r.ID)
	b = binary.BigEndian.AppendUint64(b, uint64(r.Offset))
	b = binary.BigEndian.AppendUint64(b, r.Horizon)
	b = binary.BigEndian.AppendUint16(b, uint16(len(r.Group)))
	b = append(b, r.Group...)
	return append(b, r.File...)
}

var errBadSnapshotMessage = errors.New("member: malformed snapshot message")

func decodeSnapshotRequest(b []byte) (snapshotRequest, error) {
	var r snapshotRequest
	const fixed = 8 + 8 + 8 + 2
	if len(b) < fixed {
		return r, errBadSnapshotMessage
	}
	r.ID, r.Offset, r.Horizon = binary.BigEndian.Uint64(b), int64(binary.BigEndian.Uint64(b[8:])), binary.BigEndian.Uint64(b[16:])
	n := int(binary.BigEndian.Uint16(b[24:]))
	if r.Offset < 0 || len(b) < fixed+n {
		return r, errBadSnapshotMessage
	}
	r.Group, r.File = string(b[fixed:fixed+n]), string(b[fixed+n:])
	if !persistence.IsSegmentFileName(r.File) {
		return r, fmt.Errorf("%w: %q is not a segment file", errBadSnapshotMessage, r.File)
	}
	return r, nil
}

// An answer is the request's id, a status byte, and the chunk's bytes or
// the refusal's text.
const (
	snapshotChunkOK      = 0
	snapshotChunkRefused = 1
)

func encodeSnapshotAnswer(id uint64, status byte, body []byte) []byte {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 9+len(body)), id)
	return append(append(b, status), body...)
}

// serve is the link's handler for requests: it never blocks, reading on a
// goroutine of its own within snapshotServers.
func (s *snapshots) serve(from string, data []byte) {
	req, err := decodeSnapshotRequest(data)
	if err != nil {
		s.m.log.Debug().Err(err).Str("from", from).Msg("snapshot request refused")
		return
	}
	select {
	case s.serving <- struct{}{}:
	default:
		return // busy: the copy asks again
	}
	go func() {
		defer func() { <-s.serving }()
		status, body := snapshotChunkOK, []byte(nil)
		body, refused := s.read(req)
		if refused != "" {
			status, body = snapshotChunkRefused, []byte(refused)
		}
		if p := s.m.Peers(); p != nil {
			p.Send(from, snapshotAnswerGroup, encodeSnapshotAnswer(req.ID, byte(status), body))
		}
	}()
}

// read returns up to snapshotChunk bytes of the file from the offset, an
// empty chunk at its end, or why it refuses: the replica or file is not
// here, or the log is not of the request's generation (a compaction
// committed since the snapshot, or during the read).
func (s *snapshots) read(req snapshotRequest) (chunk []byte, refused string) {
	const notHere = "no such replica or segment file here"
	const compacted = "the log was compacted since the snapshot; a new one names its files"
	d, ok := s.dirs.Load(req.Group)
	if !ok {
		return nil, notHere
	}
	dir := d.(string)
	if h, err := persistence.ReadCompactedBelow(dir); err != nil || h != req.Horizon {
		return nil, compacted
	}
	f, err := os.Open(filepath.Join(dir, req.File))
	if err != nil {
		return nil, notHere
	}
	defer f.Close()
	buf := make([]byte, snapshotChunk)
	n, err := f.ReadAt(buf, req.Offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, notHere
	}
	if h, err := persistence.ReadCompactedBelow(dir); err != nil || h != req.Horizon {
		return nil, compacted
	}
	s.noteServed(req.Group)
	return buf[:n], ""
}

// answer is the link's handler for answers: to the copy waiting for it.
func (s *snapshots) answer(_ string, data []byte) {
	if len(data) < 9 {
		return
	}
	s.mu.Lock()
	ch := s.waiting[binary.BigEndian.Uint64(data)]
	s.mu.Unlock()
	if ch != nil {
		select {
		case ch <- data[8:]:
		default: // a duplicate answer
		}
	}
}

// chunk asks node for a chunk of a file of the replica group, of the
// generation compacted below horizon, and waits.
func (s *snapshots) chunk(ctx context.Context, node, group, file string, horizon uint64, off int64) ([]byte, error) {
	for try := 1; ; try++ {
		id := s.nextID.Add(1)
		ch := make(chan []byte, 1)
		s.mu.Lock()
		s.waiting[id] = ch
		s.mu.Unlock()
		if p := s.m.Peers(); p != nil {
			p.Send(node, snapshotRequestGroup, snapshotRequest{ID: id, Offset: off, Horizon: horizon, Group: group, File: file}.encode())
		}
		timer := time.NewTimer(snapshotChunkWait)
		var got []byte
		select {
		case got = <-ch:
		case <-timer.C:
		case <-ctx.Done():
		}
		timer.Stop()
		s.mu.Lock()
		delete(s.waiting, id)
		s.mu.Unlock()
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case got != nil && got[0] == snapshotChunkOK:
			return got[1:], nil
		case got != nil:
			return nil, fmt.Errorf("member %s refused %s of %s: %s", node, file, group, got[1:])
		case try == snapshotChunkTries:
			return nil, fmt.Errorf("member %s did not answer for %s of %s", node, file, group)
		}
	}
}

// stage copies the snapshot's files from node into dir's staged directory,
// checks the copy and marks it complete (finishStaged).
func (s *snapshots) stage(ctx context.Context, node, group, dir string, files []persistence.SegmentFile, compactedBelow uint64, meta raftpb.SnapshotMetadata, cfg persistence.Config) error {
	staged := dir + replication.StagedSuffix
	if err := os.RemoveAll(staged); err != nil {
		return err
	}
	if err := os.MkdirAll(staged, 0o700); err != nil {
		return err
	}
	for _, f := range files {
		if err := s.copyFile(ctx, node, group, filepath.Join(staged, f.Name), f, compactedBelow); err != nil {
			return err
		}
	}
	return finishStaged(staged, compactedBelow, meta, cfg)
}

// finishStaged completes a staged copy of the leader's segment files: the
// leader's compaction horizon written as the copy's own (its segments have
// the leader's gaps: without it the copy's floor would be its start, and a
// cache watch resumed inside a gap would miss what compaction dropped
// there instead of starting over), the copy checked, then marked complete.
func finishStaged(staged string, compactedBelow uint64, meta raftpb.SnapshotMetadata, cfg persistence.Config) error {
	if compactedBelow > 0 {
		if err := persistence.SetCompactedBelow(staged, compactedBelow); err != nil {
			return err
		}
	}
	if err := checkStaged(staged, meta, cfg); err != nil {
		return err
	}
	return replication.WriteStagedMeta(staged, meta)
}

// copyFile copies the first f.Size bytes of one segment file, of the
// generation compacted below horizon.
func (s *snapshots) copyFile(ctx context.Context, node, group, path string, f persistence.SegmentFile, horizon uint64) error {
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	for off := int64(0); off < f.Size; {
		b, err := s.chunk(ctx, node, group, f.Name, horizon, off)
		if err != nil {
			return err
		}
		if len(b) == 0 {
			return fmt.Errorf("%s of %s on member %s ends at %d bytes, the snapshot lists %d", f.Name, group, node, off, f.Size)
		}
		b = b[:min(int64(len(b)), f.Size-off)]
		if _, err := out.Write(b); err != nil {
			return err
		}
		off += int64(len(b))
	}
	if err := out.Sync(); err != nil {
		return err
	}
	return out.Close()
}

// checkStaged opens the copy as a log (recovery checks every batch the
// durable mark does not cover: all of them, in a copy), cuts it after the
// snapshot's entry (the leader's last segment may hold later entries,
// not all committed), and checks that entry is its last.
func checkStaged(staged string, meta raftpb.SnapshotMetadata, cfg persistence.Config) error {
	cfg.RetentionBytes, cfg.RetentionAge = 0, 0
	l, err := persistence.Open(staged, cfg)
	if err != nil {
		return fmt.Errorf("open the copied log: %w", err)
	}
	last, ok := l.LastEntry()
	if ok && last.Index > meta.Index {
		if err := l.TruncateEntries(meta.Index + 1); err != nil {
			return errors.Join(err, l.Close())
		}
		last, ok = l.LastEntry()
	}
	if !ok || last.Index != meta.Index || last.Term != meta.Term {
		return errors.Join(fmt.Errorf("the copied log ends at entry %d term %d, the snapshot at %d term %d", last.Index, last.Term, meta.Index, meta.Term), l.Close())
	}
	return errors.Join(l.Sync(), l.Close())
}

// PrepareReplicaDir readies a replicated shard's directory before its log
// opens (in the registry's OpenLog hook): a copy of the leader's segments
// staged beside it is installed, then the replica id is checked.
func (m *Member) PrepareReplicaDir(def streams.Def, shard uint32) error {
	installed, err := replication.InstallStaged(m.host.LogDir(def, shard))
	if err != nil {
		return fmt.Errorf("install the snapshot staged for %s shard %d: %w", def.Scope, shard, err)
	}
	if installed {
		m.metrics.SnapshotsInstalled.Inc()
		m.log.Info().Str("stream", def.Scope.String()).Uint32("shard", shard).Msg("replica installed a copy of its leader's segments")
	}
	return m.checkReplicaID(def, shard)
}

// snapshotCopy is a follower's copy of its leader's segments under way.
type snapshotCopy struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error // set before done closes
}

// startCopy starts copying the snapshot a leader sent, unless a copy is
// under way or done: raft keeps offering snapshots meanwhile.
func (s *shardReplica) startCopy(need *replication.SnapshotNeeded) {
	if s.copy != nil || s.m.snaps == nil {
		return
	}
	node, ok := s.set.NodeOf(need.From)
	if !ok {
		return
	}
	files, compactedBelow, err := replication.DecodeSnapshotFiles(need.Data)
	if err != nil {
		s.log.Warn().Err(err).Str("from", node).Msg("snapshot refused")
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &snapshotCopy{cancel: cancel, done: make(chan struct{})}
	s.copy = c
	s.log.Info().Str("from", node).Uint64("index", need.Metadata.Index).Int("files", len(files)).
		Msg("replica is behind its leader's compaction point; copying the leader's segments")
	snaps, group, dir, meta, cfg := s.m.snaps, s.group, s.dir, need.Metadata, s.logCfg
	go func() {
		defer close(c.done)
		c.err = snaps.stage(ctx, node, group, dir, files, compactedBelow, meta, cfg)
	}()
}

// copyStaged reports whether a copy finished and is staged: the shard
// then stops, and its replica starts again on the copy. A copy that
// failed is forgotten, so the leader's next snapshot starts another.
func (s *shardReplica) copyStaged() bool {
	if s.copy == nil {
		return false
	}
	select {
	case <-s.copy.done:
	default:
		return false
	}
	if s.copy.err != nil {
		s.log.Warn().Err(s.copy.err).Msg("copy of the leader's segments failed; the next snapshot starts another")
		s.copy = nil
		return false
	}
	return true
}

// stopCopy ends a copy under way and waits for it.
func (s *shardReplica) stopCopy() {
	if s.copy != nil {
		s.copy.cancel()
		<-s.copy.done
	}
}
