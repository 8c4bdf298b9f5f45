package actors_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/getfelix/felix-go/actors"
)

// TestTree: the tree lists live actors sorted by path (a parent before
// its children), each with its parent, labels and mailbox bounds and
// counters; an actor on protoactor's default mailbox has no counters, and
// a stopped actor is not listed.
func TestTree(t *testing.T) {
	d := actors.NewDirectory()
	feeder := actors.NewMailbox(actors.MailboxConfig{Capacity: 4, MaxBytes: 1 << 20, Policy: actors.DropOld})
	feeder.PostUserMessage(&sized{bytes: 100})
	gone := actors.NewMailbox(actors.MailboxConfig{Capacity: 1})
	gone.Close()
	d.Add(&actor.PID{Id: "felix/subscribers/sub-1"}, actors.KindFeeder, feeder, map[string]string{"stream": "s"})
	d.Add(&actor.PID{Id: "felix/subscribers/sub-2"}, actors.KindFeeder, gone, nil)
	d.Add(&actor.PID{Id: "felix/subscribers"}, actors.KindSupervisor, nil, nil)
	d.RecordFailure("felix/subscribers/sub-1", actor.RestartDirective, "boom")

	got := d.Tree()
	if len(got) != 2 {
		t.Fatalf("Tree() = %+v; want the supervisor and sub-1 (sub-2 stopped)", got)
	}
	if f := got[1].LastFailure; f == nil || f.Reason != "boom" {
		t.Fatalf("sub-1's last failure %+v; want reason boom", f)
	}
	got[1].LastFailure = nil
	want := []actors.Info{
		{Path: "felix/subscribers", Kind: "supervisor", Parent: "felix"},
		{Path: "felix/subscribers/sub-1", Kind: "feeder", Parent: "felix/subscribers", Labels: map[string]string{"stream": "s"},
			MailboxDepth: 1, MailboxBytes: 100, PeakBytes: 100, Capacity: 4, MaxBytes: 1 << 20, Policy: "drop_old", Restarts: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Tree() =\n%+v\nwant\n%+v", got, want)
	}
}

// TestInfoJSON: a node's JSON, which GET /debug/actors serves and felix
// tree and the pages read, field for field.
func TestInfoJSON(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	tests := []struct {
		name string
		give actors.Info
		want string
	}{
		{"every field", actors.Info{Path: "felix/a/b", Kind: "feeder", Parent: "felix/a", Labels: map[string]string{"x": "y", "a": "b"},
			MailboxDepth: 1, MailboxBytes: 2, PeakBytes: 3, Capacity: 4, MaxBytes: 5, Policy: "block", Dropped: 6, ByteDropped: 7, Evicted: 8,
			Restarts: 9, LastFailure: &actors.Failure{At: at, Reason: "r"}},
			`{"path":"felix/a/b","kind":"feeder","parent":"felix/a","labels":{"a":"b","x":"y"},"mailbox_depth":1,"mailbox_bytes":2,"mailbox_peak_bytes":3,"capacity":4,"max_bytes":5,"policy":"block","dropped":6,"byte_dropped":7,"evicted":8,"restarts":9,"last_failure":{"at":"2026-01-02T03:04:05.000000006Z","reason":"r"}}`},
		{"zero", actors.Info{},
			`{"path":"","kind":"","mailbox_depth":0,"mailbox_bytes":0,"mailbox_peak_bytes":0,"capacity":0,"policy":"","dropped":0,"byte_dropped":0,"evicted":0,"restarts":0}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.Marshal(tt.give)
			if err != nil || string(got) != tt.want {
				t.Fatalf("json.Marshal(%+v) = %s, %v; want %s", tt.give, got, err, tt.want)
			}
		})
	}
}
