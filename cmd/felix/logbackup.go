package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/getfelix/felix-go/metadata"
	"github.com/getfelix/felix-go/persistence"
)

// backupManifest is backup.json: what a backup holds. Written last, so a
// folder without it is an interrupted backup, which restore refuses.
type backupManifest struct {
	// Format is backupFormat; restore refuses another.
	Format int                `json:"format"`
	Felix  string             `json:"felix"`
	Time   time.Time          `json:"time"`
	Stream metadata.StreamDef `json:"stream"`
	Shards []backedUpShard    `json:"shards"`
}

// backedUpShard is one shard's copy: offsets [Start, End).
type backedUpShard struct {
	Shard int `json:"shard"`
	persistence.CopyReport
}

const (
	backupFormat       = 1
	backupManifestName = "backup.json"
)

// shardDir is where a shard's log lives in a data directory.
func shardDir(dataDir string, d metadata.StreamDef, shard int) string {
	return filepath.Join(dataDir, "streams", d.Tenant, d.Namespace, d.Stream, strconv.Itoa(shard))
}

func (o *logOpts) backup(w io.Writer) error {
	switch {
	case o.stream == "":
		return usagef("backup needs --stream")
	case o.to == "":
		return usagef("backup needs --to, a new or empty folder")
	case o.yes || o.salvage || o.from != "" || o.shard >= 0:
		return usagef("backup takes --data-dir, --tenant, --namespace, --stream, --to and --json")
	}
	scope := o.scope()
	if _, err := os.Stat(filepath.Join(o.dataDir, metadata.FileName)); err != nil {
		return fmt.Errorf("no broker has run on %s (no %s): check --data-dir", o.dataDir, metadata.FileName)
	}
	store, err := openLocked(o.dataDir, "backing up (or back up a copy of the data directory)")
	if err != nil {
		return err
	}
	defer store.Close()
	def, err := findStream(store, scope)
	if err != nil {
		return err
	}
	if !def.Durable {
		return fmt.Errorf("%s is an in-memory stream: it has nothing on disk to back up", o.scopeName())
	}
	if entries, err := os.ReadDir(o.to); err == nil && len(entries) > 0 {
		return fmt.Errorf("%s is not empty: back up into a new or empty folder", o.to)
	}
	m := backupManifest{Format: backupFormat, Felix: version(), Time: time.Now().UTC(), Stream: def}
	for shard := range int(def.Shards) {
		src := shardDir(o.dataDir, def, shard)
		if _, err := os.Stat(filepath.Join(src, "replica.id")); err == nil {
			return fmt.Errorf("%s shard %d is a replica of a replicated stream: its copies are the other members' replicas; back up a single broker's stream", o.scopeName(), shard)
		}
		dst := filepath.Join(o.to, "shards", strconv.Itoa(shard))
		rep := &persistence.CopyReport{}
		if _, err := os.Stat(src); errors.Is(err, os.ErrNotExist) {
			err = os.MkdirAll(dst, 0o700) // a shard nothing was ever written to
			if err != nil {
				return err
			}
		} else if rep, err = persistence.CopyLog(src, dst); err != nil {
			return fmt.Errorf("%s shard %d: %w", o.scopeName(), shard, err)
		}
		m.Shards = append(m.Shards, backedUpShard{Shard: shard, CopyReport: *rep})
	}
	if err := writeFileSynced(filepath.Join(o.to, backupManifestName), m); err != nil {
		return err
	}
	if o.json {
		return json.NewEncoder(w).Encode(m)
	}
	fmt.Fprintf(w, "backed up %s (%d shards) into %s:\n", o.scopeName(), def.Shards, o.to)
	printBackedUpShards(w, m.Shards)
	return nil
}

func (o *logOpts) restore(w io.Writer) error {
	switch {
	case o.from == "":
		return usagef("restore needs --from, a folder felix log backup wrote")
	case o.yes || o.salvage || o.to != "" || o.shard >= 0 || o.stream != "" || o.tenant != "" || o.namespace != "":
		return usagef("restore takes --data-dir, --from and --json: the stream is the backup's")
	}
	b, err := os.ReadFile(filepath.Join(o.from, backupManifestName))
	if err != nil {
		return fmt.Errorf("%s is not a complete backup (no %s; an interrupted backup has none): %w", o.from, backupManifestName, err)
	}
	var m backupManifest
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(o.from, backupManifestName), err)
	}
	if m.Format != backupFormat || len(m.Shards) != int(m.Stream.Shards) {
		return fmt.Errorf("%s: format %d with %d of %d shards; this felix restores format %d with every shard", filepath.Join(o.from, backupManifestName), m.Format, len(m.Shards), m.Stream.Shards, backupFormat)
	}
	def := m.Stream
	name := def.Tenant + "/" + def.Namespace + "/" + def.Stream
	store, err := openLocked(o.dataDir, "restoring")
	if err != nil {
		return err
	}
	defer store.Close()
	if _, err := findStream(store, def); err == nil {
		return fmt.Errorf("%s already has a stream %s: restore into a data directory without it (delete the stream first, or use a fresh --data-dir)", o.dataDir, name)
	}
	final := filepath.Join(o.dataDir, "streams", def.Tenant, def.Namespace, def.Stream)
	if _, err := os.Stat(final); err == nil {
		return fmt.Errorf("%s exists but metadata.db has no stream %s: move it away before restoring", final, name)
	}
	// The shards go into a staging folder renamed into place once all are
	// copied, and the definition is recorded last: a broker never sees
	// half a stream.
	staging := final + ".restoring"
	if err := os.RemoveAll(staging); err != nil {
		return err
	}
	for _, sh := range m.Shards {
		src := filepath.Join(o.from, "shards", strconv.Itoa(sh.Shard))
		dst := filepath.Join(staging, strconv.Itoa(sh.Shard))
		rep, err := persistence.CopyLog(src, dst)
		if err != nil {
			return fmt.Errorf("restore %s shard %d: %w", name, sh.Shard, err)
		}
		if rep.End != sh.End || rep.Start != sh.Start {
			return fmt.Errorf("restore %s shard %d: the backup holds offsets %d..%d but %s says %d..%d: the backup was changed since", name, sh.Shard, rep.Start, rep.End, backupManifestName, sh.Start, sh.End)
		}
	}
	if err := os.Rename(staging, final); err != nil {
		return err
	}
	if err := (persistence.OSFS).SyncDir(filepath.Dir(final)); err != nil {
		return err
	}
	if err := store.PutStream(def); err != nil {
		return err
	}
	if o.json {
		return json.NewEncoder(w).Encode(m)
	}
	fmt.Fprintf(w, "restored %s (%d shards, backed up %s) into %s:\n", name, def.Shards, m.Time.Format(time.RFC3339), o.dataDir)
	printBackedUpShards(w, m.Shards)
	return nil
}

func printBackedUpShards(w io.Writer, shards []backedUpShard) {
	for _, sh := range shards {
		fmt.Fprintf(w, "  shard %d: offsets %s (%d records, %d bytes)\n", sh.Shard, offsetRange(sh.Start, sh.End), sh.Records, sh.Bytes)
	}
}

func (o *logOpts) scope() metadata.StreamDef {
	d := metadata.StreamDef{Tenant: o.tenant, Namespace: o.namespace, Stream: o.stream}
	if d.Tenant == "" {
		d.Tenant = "default"
	}
	if d.Namespace == "" {
		d.Namespace = "default"
	}
	return d
}

func (o *logOpts) scopeName() string {
	d := o.scope()
	return d.Tenant + "/" + d.Namespace + "/" + d.Stream
}

// findStream is the definition of scope's stream in store.
func findStream(store *metadata.Store, scope metadata.StreamDef) (metadata.StreamDef, error) {
	defs, err := store.Streams()
	if err != nil {
		return metadata.StreamDef{}, err
	}
	for _, d := range defs {
		if d.Tenant == scope.Tenant && d.Namespace == scope.Namespace && d.Stream == scope.Stream {
			return d, nil
		}
	}
	return metadata.StreamDef{}, fmt.Errorf("no stream %s/%s/%s in %s (a cluster member's definitions are in etcd: back up a single broker's data directory)", scope.Tenant, scope.Namespace, scope.Stream, metadata.FileName)
}

// writeFileSynced writes v as JSON to path through a fsynced temporary
// file renamed into place, then fsyncs the folder.
func writeFileSynced(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = persistence.OSFS.SyncDir(filepath.Dir(path))
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
