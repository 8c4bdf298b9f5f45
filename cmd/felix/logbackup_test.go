package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

// TestLogBackupRestore backs up a stopped broker's durable stream, refused
// while the broker runs, restores it into a fresh data directory, and
// starts a broker there: it serves every record at its offset, and the
// next publish lands at the backup's end. A second restore is refused.
func TestLogBackupRestore(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	st := client.Stream{Name: "orders"}
	const n = 40
	ctx, cancel := context.WithTimeout(context.Background(), 3*waitTimeout)
	defer cancel()
	writeRecords(ctx, t, data, st, n)
	backup := filepath.Join(t.TempDir(), "backup")
	args := []string{"log", "backup", "--data-dir", data, "--stream", "orders", "--to", backup}

	p, c := startBrokerOn(t, data, "2")
	refused := runFelix(t, opts{}, args...)
	refused.wantExit(t, 1)
	if !strings.Contains(refused.stderr.String(), "a broker is running on") {
		t.Fatalf("backup under a running broker: %s", refused.stderr)
	}
	stopBroker(t, p, c)

	r := runFelix(t, opts{}, args...)
	r.wantExit(t, 0)
	if out := r.stdout.String(); !strings.Contains(out, fmt.Sprintf("shard 0: offsets 0..%d (%d records", n-1, n)) {
		t.Fatalf("backup:\n%s", out)
	}
	var m backupManifest
	b, err := os.ReadFile(filepath.Join(backup, backupManifestName))
	if err == nil {
		err = json.Unmarshal(b, &m)
	}
	if err != nil || m.Stream.Stream != "orders" || !m.Stream.Durable || len(m.Shards) != 1 || m.Shards[0].End != n {
		t.Fatalf("%s: %+v, %v", backupManifestName, m, err)
	}
	runFelix(t, opts{}, args...).wantExit(t, 1) // --to is no longer empty

	fresh := filepath.Join(t.TempDir(), "fresh")
	restore := runFelix(t, opts{}, "log", "restore", "--data-dir", fresh, "--from", backup)
	restore.wantExit(t, 0)
	if out := restore.stdout.String(); !strings.Contains(out, "restored default/default/orders") {
		t.Fatalf("restore:\n%s", out)
	}
	again := runFelix(t, opts{}, "log", "restore", "--data-dir", fresh, "--from", backup)
	again.wantExit(t, 1)
	if !strings.Contains(again.stderr.String(), "already has a stream default/default/orders") {
		t.Fatalf("a second restore: %s", again.stderr)
	}

	p, c = startBrokerOn(t, fresh, "3")
	defer stopBroker(t, p, c)
	next := uint64(0)
	for next < n {
		page, err := c.Read(ctx, st, next, client.ReadOptions{})
		if err != nil || len(page.Records) == 0 {
			t.Fatalf("read the restored stream from %d: %d records, %v", next, len(page.Records), err)
		}
		for _, rec := range page.Records {
			if want := fmt.Sprintf("rec-%d", next); rec.Offset != next || string(rec.Payload) != want {
				t.Fatalf("restored offset %d holds %q, want offset %d holding %q", rec.Offset, rec.Payload, next, want)
			}
			next++
		}
	}
	res, err := c.PublishResult(ctx, st, [][]byte{[]byte("after")}, client.PublishOptions{Ack: wire.AckPerBatch})
	if err != nil || res.Offset != n {
		t.Fatalf("publish after restore: offset %d, %v; want offset %d", res.Offset, err, n)
	}
}

// TestLogBackupRefusals: the usage and the streams backup cannot copy.
func TestLogBackupRefusals(t *testing.T) {
	dir := t.TempDir()
	runFelix(t, opts{}, "log", "backup", "--data-dir", dir, "--to", filepath.Join(dir, "b")).wantExit(t, 2)
	runFelix(t, opts{}, "log", "backup", "--data-dir", dir, "--stream", "s").wantExit(t, 2)
	runFelix(t, opts{}, "log", "restore", "--data-dir", dir).wantExit(t, 2)
	runFelix(t, opts{}, "log", "verify", "--data-dir", dir, "--to", filepath.Join(dir, "b")).wantExit(t, 2)
	runFelix(t, opts{}, "log", "restore", "--data-dir", dir, "--from", dir, "--stream", "s").wantExit(t, 2)
	r := runFelix(t, opts{}, "log", "restore", "--data-dir", dir, "--from", t.TempDir())
	r.wantExit(t, 1)
	if !strings.Contains(r.stderr.String(), "not a complete backup") {
		t.Fatalf("restore from an empty folder: %s", r.stderr)
	}
	r = runFelix(t, opts{}, "log", "backup", "--data-dir", dir, "--stream", "s", "--to", filepath.Join(dir, "b"))
	r.wantExit(t, 1)
	if !strings.Contains(r.stderr.String(), "no broker has run on") {
		t.Fatalf("backup of a folder no broker used: %s", r.stderr)
	}
}
