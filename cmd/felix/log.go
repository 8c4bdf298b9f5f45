package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/getfelix/felix-go/metadata"
	"github.com/getfelix/felix-go/persistence"
	"github.com/getfelix/felix-go/wire"
)

type logOpts struct {
	dataDir, tenant, namespace, stream string
	shard                              int
	yes, json, salvage                 bool
	to, from                           string // backup's destination, restore's source
}

func newLogCmd() *command {
	o := &logOpts{}
	fs := newFlagSet("log")
	fs.StringVar(&o.dataDir, "data-dir", "", "the broker's data directory (required)")
	fs.StringVar(&o.tenant, "tenant", "", "only this tenant's streams (repair: default \"default\")")
	fs.StringVar(&o.namespace, "namespace", "", "only this namespace's streams (repair: default \"default\")")
	fs.StringVar(&o.stream, "stream", "", "only this stream (required by repair)")
	fs.IntVar(&o.shard, "shard", -1, "only this shard (required by repair)")
	fs.BoolVar(&o.yes, "yes", false, "repair: do it; without it repair says what it would do and changes nothing")
	fs.BoolVar(&o.salvage, "salvage", false, "repair: keep the good batches after each damaged one instead of cutting the log at the first (lost offsets become empty records with the header felix-lost: salvage)")
	fs.StringVar(&o.to, "to", "", "backup: the new or empty folder to write the backup into")
	fs.StringVar(&o.from, "from", "", "restore: the folder felix log backup wrote")
	fs.BoolVar(&o.json, "json", false, "print JSON")
	c := &command{
		name:  "log",
		args:  "verify|repair|backup|restore",
		short: "check, repair, back up and restore durable logs offline",
		long: `Checks and repairs the durable logs in a data directory, without a broker.

verify reads every shard's log under <data-dir>/streams/<tenant>/<namespace>/<stream>/<shard>:
every batch's checksum and framing, the offsets across segments, the sparse
indexes against the batches, and durable.mark. It only reads, so it may run
alongside a broker, but what it says of a shard's unsynced end may then be
already out of date. Exit 0 when nothing the broker would refuse was found,
1 when damage was found. A torn unsynced tail and a bad index are reported
but are not damage: the broker fixes them itself when it opens the log.

repair cuts one shard's log at the last good batch before the first damage:
it moves the damaged tail into a damaged-<time>/ folder next to the
segments (never deleting it), rebuilds the indexes, rewrites durable.mark,
and prints the offsets lost. Without --yes it only says what it would do.
It refuses while a broker runs on the data directory (metadata.db's lock).

repair --salvage keeps what follows the damage: it skips each damaged
stretch (a batch that fails its checks, up to the next one that passes) and
keeps every good batch after it, each record at its offset. The offsets a
stretch held stay taken: each becomes an empty record with the header
felix-lost: salvage, so readers see every offset and can tell the lost
ones. Damage at the log's very end, with nothing good after it, is cut as
without --salvage. The lost offsets are printed and appended to
lost-offsets.json in the shard's directory; rewritten segments' originals
go into a damaged-<time>/ folder. A replicated stream's log is refused.

backup copies one durable stream, every shard, into a new folder: its
definition from metadata.db and each shard's log up to its last complete
batch, every byte verified as verify reads it; backup.json, written last,
names the offsets each shard's copy ends at. restore puts such a backup
into a data directory that does not have the stream (a fresh one, or one
the stream was deleted from), verified again, the definition recorded
last. Both take metadata.db's lock, so no broker may run on the data
directory meanwhile; stop it, or back up a copy of its data directory.
Consumer groups' cursors and idempotent producer ids are not in a backup.

  felix log verify --data-dir D [--tenant T] [--namespace NS] [--stream S] [--shard N] [--json]
  felix log repair --data-dir D --stream S [--namespace NS] [--tenant T] --shard N [--salvage] [--yes] [--json]
  felix log backup --data-dir D --stream S [--namespace NS] [--tenant T] --to DIR [--json]
  felix log restore --data-dir D --from DIR [--json]`,
		flags: fs,
	}
	c.run = o.run
	return c
}

func (o *logOpts) run(_ context.Context, args []string) error {
	if len(args) != 1 {
		return usagef("log needs one of verify, repair, backup, restore; got %q", args)
	}
	if o.dataDir == "" {
		return usagef("--data-dir is required")
	}
	switch args[0] {
	case "verify", "repair":
		if o.to != "" || o.from != "" {
			return usagef("--to is backup's and --from restore's")
		}
	}
	switch args[0] {
	case "verify":
		if o.yes || o.salvage {
			return usagef("--yes and --salvage are repair's")
		}
		return o.verify(os.Stdout)
	case "repair":
		return o.repair(os.Stdout)
	case "backup":
		return o.backup(os.Stdout)
	case "restore":
		return o.restore(os.Stdout)
	}
	return usagef("log needs one of verify, repair, backup, restore; got %q", args[0])
}

// shardLog is one shard's log directory.
type shardLog struct {
	scope string // tenant/namespace/stream
	shard int
	dir   string
}

func (s shardLog) String() string { return fmt.Sprintf("%s shard %d", s.scope, s.shard) }

// shardLogs walks <data-dir>/streams/<tenant>/<namespace>/<stream>/<shard>,
// keeping what the flags select, in name order.
func (o *logOpts) shardLogs() ([]shardLog, error) {
	root := filepath.Join(o.dataDir, "streams")
	if _, err := os.Stat(root); err != nil {
		return nil, fmt.Errorf("no durable streams in %s: %w", o.dataDir, err)
	}
	var out []shardLog
	filters := []string{o.tenant, o.namespace, o.stream}
	var walk func(dir string, names []string) error
	walk = func(dir string, names []string) error {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			name := e.Name()
			if !e.IsDir() || strings.Contains(name, wire.TrashSuffix) {
				continue
			}
			if len(names) == 3 {
				n, err := strconv.Atoi(name)
				if err == nil && n >= 0 && (o.shard < 0 || n == o.shard) {
					out = append(out, shardLog{scope: strings.Join(names, "/"), shard: n, dir: filepath.Join(dir, name)})
				}
				continue
			}
			if f := filters[len(names)]; f != "" && f != name {
				continue
			}
			if err := walk(filepath.Join(dir, name), append(names[:len(names):len(names)], name)); err != nil {
				return err
			}
		}
		return nil
	}
	return out, walk(root, nil)
}

// verifiedShard is one shard in verify's JSON.
type verifiedShard struct {
	Scope   string                    `json:"stream"`
	Shard   int                       `json:"shard"`
	Damaged bool                      `json:"damaged"`
	Report  *persistence.VerifyReport `json:"report"`
}

func (o *logOpts) verify(w io.Writer) error {
	shards, err := o.shardLogs()
	if err != nil {
		return err
	}
	if len(shards) == 0 {
		return fmt.Errorf("no shard's log under %s matches", filepath.Join(o.dataDir, "streams"))
	}
	var results []verifiedShard
	damaged := 0
	for _, s := range shards {
		rep, err := persistence.Verify(s.dir)
		if err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
		results = append(results, verifiedShard{Scope: s.scope, Shard: s.shard, Damaged: rep.Damaged(), Report: rep})
		if rep.Damaged() {
			damaged++
		}
		if !o.json {
			printVerified(w, s, rep)
		}
	}
	if o.json {
		if err := json.NewEncoder(w).Encode(map[string]any{"shards": results}); err != nil {
			return err
		}
	}
	if damaged > 0 {
		return fmt.Errorf("damage found in %d of %d shards' logs: see `felix log repair --help`", damaged, len(shards))
	}
	return nil
}

func printVerified(w io.Writer, s shardLog, rep *persistence.VerifyReport) {
	state := "ok"
	if rep.Damaged() {
		state = "DAMAGED"
	}
	fmt.Fprintf(w, "%s: %s (%s)\n", s, state, s.dir)
	for _, seg := range rep.Segments {
		fmt.Fprintf(w, "  %s  %d bytes  %d batches  %d records  offsets %s\n", seg.Name, seg.Bytes, seg.Batches, seg.Records, offsetRange(seg.First, seg.Next))
	}
	if rep.Mark != nil {
		fmt.Fprintf(w, "  durable.mark: offsets below %d synced\n", rep.Mark.Offset)
	}
	for _, p := range rep.AllProblems() {
		fmt.Fprintf(w, "  %s\n", p)
	}
}

// offsetRange prints [from, to) as "from..to-1", or "none".
func offsetRange(from, to uint64) string {
	if to <= from {
		return "none"
	}
	return fmt.Sprintf("%d..%d", from, to-1)
}

func (o *logOpts) repair(w io.Writer) error {
	switch {
	case o.stream == "":
		return usagef("repair needs --stream")
	case o.shard < 0:
		return usagef("repair needs --shard")
	}
	if o.tenant == "" {
		o.tenant = "default"
	}
	if o.namespace == "" {
		o.namespace = "default"
	}
	dir := filepath.Join(o.dataDir, "streams", o.tenant, o.namespace, o.stream, strconv.Itoa(o.shard))
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("no log for %s/%s/%s shard %d: %w", o.tenant, o.namespace, o.stream, o.shard, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "replica.id")); err == nil && o.yes {
		// Cutting one replica's log can drop entries it confirmed to the
		// others: raft's promises rest on them.
		return fmt.Errorf("%s/%s/%s shard %d is a replica of a replicated stream: do not cut it; move the replica to another member instead (felix cluster move-replica), which deletes this copy", o.tenant, o.namespace, o.stream, o.shard)
	}
	unlock, err := lockDataDir(o.dataDir)
	if err != nil {
		return err
	}
	defer unlock()
	if o.salvage {
		return o.salvageShard(w, dir)
	}
	return report(w, o, func() (*persistence.RepairReport, error) {
		if o.yes {
			return persistence.Repair(dir, time.Now())
		}
		rep, _, err := persistence.PlanRepair(dir)
		return rep, err
	}, printRepair)
}

// report runs a repair (or, without --yes, plans it) and prints its report
// as JSON (--json) or for people.
func report[R any](w io.Writer, o *logOpts, run func() (R, error), print func(io.Writer, R)) error {
	rep, err := run()
	if err != nil {
		return err
	}
	if o.json {
		return json.NewEncoder(w).Encode(rep)
	}
	print(w, rep)
	return nil
}

func printRepair(w io.Writer, rep *persistence.RepairReport) {
	if !rep.Needed {
		fmt.Fprintf(w, "nothing to repair in %s: the broker opens this log as it is (see felix log verify)\n", rep.Dir)
		return
	}
	lost := "offsets " + offsetRange(rep.LostFrom, rep.LostTo)
	if rep.LostTo == rep.LostFrom {
		lost = fmt.Sprintf("the damaged batch's records from offset %d (their count is unreadable; none was synced)", rep.LostFrom)
	}
	verb, moved, ends := "would cut", "would move", "would then end"
	where := "a damaged-<time> folder in " + rep.Dir
	if rep.Applied {
		verb, moved, ends, where = "cut", "moved", "now ends", rep.DamagedDir
	}
	fmt.Fprintf(w, "%s %s at byte %d: the log %s at offset %d\n", verb, rep.CutFile, rep.CutPosition, ends, rep.LostFrom)
	fmt.Fprintf(w, "lost: %s\n", lost)
	fmt.Fprintf(w, "%s %s to %s (the good part of the cut segment, if any, copied back); indexes rebuilt, durable.mark at offset %d\n",
		moved, strings.Join(rep.Moved, ", "), where, rep.Mark.Offset)
	if !rep.Applied {
		fmt.Fprintln(w, "nothing was changed: run again with --yes to repair")
	}
}

func (o *logOpts) salvageShard(w io.Writer, dir string) error {
	return report(w, o, func() (*persistence.SalvageReport, error) {
		if o.yes {
			return persistence.Salvage(dir, time.Now())
		}
		return persistence.PlanSalvage(dir)
	}, printSalvage)
}

func printSalvage(w io.Writer, rep *persistence.SalvageReport) {
	if !rep.Needed {
		fmt.Fprintf(w, "nothing to repair in %s: the broker opens this log as it is (see felix log verify)\n", rep.Dir)
		return
	}
	verb, kept, ends := "would lose", "would keep", "would end"
	if rep.Applied {
		verb, kept, ends = "lost", "kept", "ends"
	}
	for _, l := range rep.Lost {
		where := fmt.Sprintf("%d bytes of %s from byte %d", l.Bytes, l.File, l.Position)
		if l.Position < 0 {
			where = l.File
		}
		switch {
		case l.Tail && l.To == l.From:
			fmt.Fprintf(w, "%s: the damaged batch's records from offset %d, at the log's end (their count is unreadable; none was synced) (%s: %s)\n", verb, l.From, where, l.Reason)
		case l.Tail:
			fmt.Fprintf(w, "%s: offsets %s, at the log's end: cut (%s: %s)\n", verb, offsetRange(l.From, l.To), where, l.Reason)
		case l.To == l.From:
			fmt.Fprintf(w, "%s: no offset; skipped %s (%s)\n", verb, where, l.Reason)
		default:
			fmt.Fprintf(w, "%s: offsets %s, now empty records with the header %s: %s (%s: %s)\n", verb, offsetRange(l.From, l.To), persistence.LostHeader, persistence.LostHeaderValue, where, l.Reason)
		}
	}
	fmt.Fprintf(w, "%s %d records after the first damage; %d offsets lost in all; the log %s at offset %d\n", kept, rep.Kept, rep.LostOffsets(), ends, rep.Mark.Offset)
	rewritten := strings.Join(rep.Rewritten, ", ")
	if rewritten == "" {
		rewritten = "no segment"
	}
	if !rep.Applied {
		fmt.Fprintf(w, "would rewrite %s (originals into a damaged-<time> folder in %s), write durable.mark at the end and append the lost offsets to %s\n", rewritten, rep.Dir, rep.LostFile)
		fmt.Fprintln(w, "nothing was changed: run again with --yes to repair")
		return
	}
	fmt.Fprintf(w, "rewrote %s (originals and the old durable.mark in %s); lost offsets appended to %s\n", rewritten, rep.DamagedDir, rep.LostFile)
}

// lockDataDir takes the data directory's lock, metadata.db's, as a broker
// does, so that no broker runs on the directory while it is held.
func lockDataDir(dataDir string) (func(), error) {
	if _, err := os.Stat(filepath.Join(dataDir, metadata.FileName)); errors.Is(err, os.ErrNotExist) {
		return func() {}, nil // no broker has ever run here
	}
	store, err := openLocked(dataDir, "repairing")
	if err != nil {
		return nil, err
	}
	return func() { _ = store.Close() }, nil
}

// openLocked opens metadata.db, which takes the data directory's lock,
// saying what to do when a broker holds it; before is what the caller was
// about to do ("repairing").
func openLocked(dataDir, before string) (*metadata.Store, error) {
	store, err := metadata.Open(dataDir)
	if errors.Is(err, metadata.ErrLocked) {
		return nil, fmt.Errorf("a broker is running on %s (it holds %s's lock): stop it before %s; felix log verify may run alongside it", dataDir, metadata.FileName, before)
	}
	return store, err
}
