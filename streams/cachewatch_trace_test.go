package streams

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/cockroachdb/datadriven"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/cache"
	"github.com/getfelix/felix-go/wire"
)

// TestCacheWatchTrace runs testdata/cachewatch_*.txt against a cache
// shard (in memory, or durable over a fake log) and watchers that are
// bounded mailboxes. Commands:
//
//	open [durable] [history=N]               a new shard (durable: over the trace's log) keeping N changes
//	reopen                                   the shard stops; a new one opens the same log
//	watch id=N key=K|prefix=P [from=V] [retained] [cap=N] [end]   end: snapshots end with a snapshot_end
//	put key=K [value=V] [ttl=D] [if-version=V] [if-absent]
//	del key=K [if-version=V]
//	commit key=K ops=(a=1,-b) [event=E]
//	tick D                                   the shard's clock moves
//	expire                                   the shard's expiry round runs now
//	hold id=N | release id=N                 a watcher stops or resumes taking from its queue
//	events id=N                              what watcher N took since the last events
//	unwatch id=N
//	shared                                   how many changes the watchers took, and how many envelopes carried them
func TestCacheWatchTrace(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if !strings.HasPrefix(pathBase(path), "cachewatch_") {
			t.Skip("not a cache watch trace")
		}
		tr := &watchTrace{log: newFakeLog(0), watchers: map[uint64]*traceWatcher{}, taken: map[*Envelope]int{}}
		tr.now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "open" && tr.ts == nil {
				d.Fatalf(t, "%s before open", d.Cmd)
			}
			return tr.run(t, d)
		})
	})
}

type watchTrace struct {
	ts       *testShard
	durable  bool
	history  int
	log      *fakeLog
	now      atomic.Int64
	watchers map[uint64]*traceWatcher
	// taken counts, per envelope, the watchers that took it: one
	// envelope (one encoding) per change, whatever the fanout.
	taken map[*Envelope]int
}

// traceWatcher is a watch's stand-in feeder: it takes what the shard
// offers into got, and a marker (a data message, so behind everything
// queued) tells when it took all that was queued before it.
type traceWatcher struct {
	mb  *actors.Mailbox
	got chan any
}

type watchMarker struct{}

type traceWatcherActor struct{ got chan any }

func (a *traceWatcherActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *Envelope, *SubscriberEvicted, *watchMarker:
		a.got <- m
	}
}

func (tr *watchTrace) run(t *testing.T, d *datadriven.TestData) string {
	switch d.Cmd {
	case "open":
		tr.durable = d.HasArg("durable")
		d.MaybeScanArgs(t, "history", &tr.history)
		tr.open(t)
		return "ok\n"
	case "reopen":
		if err := tr.ts.sys.Root.StopFuture(tr.ts.sup).Wait(); err != nil {
			d.Fatalf(t, "stop: %v", err)
		}
		tr.open(t)
		return "ok\n"
	case "watch":
		return tr.watch(t, d)
	case "put", "del", "commit":
		return tr.write(t, d)
	case "tick":
		dur, err := time.ParseDuration(d.CmdArgs[0].Key)
		if err != nil {
			d.Fatalf(t, "tick: %v", err)
		}
		tr.now.Add(int64(dur))
		return "ok\n"
	case "expire":
		if r := tr.ts.ref.Mailbox.TryPost(expireDueMessage, 0); !r.Accepted() {
			d.Fatalf(t, "expiry round not admitted: %v", r)
		}
		tr.ts.read(t, &CacheGet{Key: ""}) // a barrier behind the expire records
		return "ok\n"
	case "hold", "release":
		w := tr.watcher(t, d)
		if d.Cmd == "hold" {
			w.mb.Hold()
		} else {
			w.mb.Release()
		}
		return "ok\n"
	case "events":
		return tr.events(t, d)
	case "shared":
		offers := 0
		for _, n := range tr.taken {
			offers += n
		}
		return fmt.Sprintf("%d changes taken, in %d envelopes\n", offers, len(tr.taken))
	case "unwatch":
		var id uint64
		d.ScanArgs(t, "id", &id)
		if r := tr.ts.ref.Mailbox.TryPost(&RemoveSubscriber{ID: id}, 0); !r.Accepted() {
			d.Fatalf(t, "unwatch not admitted: %v", r)
		}
		tr.ts.read(t, &CacheGet{Key: ""})
		return "ok\n"
	}
	d.Fatalf(t, "unknown command %s", d.Cmd)
	return ""
}

func (tr *watchTrace) open(t *testing.T) {
	cfg := ShardConfig{now: func() time.Time { return time.Unix(0, tr.now.Load()) }, cacheExpiryInterval: time.Hour, watchHistoryChanges: tr.history}
	var log *fakeLog
	if tr.durable {
		log = tr.log
	}
	tr.ts = spawnCacheShard(t, cfg, log, CacheSettings{})
	tr.watchers = map[uint64]*traceWatcher{}
}

func (tr *watchTrace) watcher(t *testing.T, d *datadriven.TestData) *traceWatcher {
	var id uint64
	d.ScanArgs(t, "id", &id)
	w := tr.watchers[id]
	if w == nil {
		d.Fatalf(t, "no watcher %d", id)
	}
	return w
}

func (tr *watchTrace) watch(t *testing.T, d *datadriven.TestData) string {
	var id uint64
	capacity := 64
	d.ScanArgs(t, "id", &id)
	d.MaybeScanArgs(t, "cap", &capacity)
	msg := &AddWatcher{ID: id, Retained: d.HasArg("retained"), SnapshotEnd: d.HasArg("end")}
	if d.HasArg("prefix") {
		d.ScanArgs(t, "prefix", &msg.Key)
		msg.Prefix = true
	} else {
		d.ScanArgs(t, "key", &msg.Key)
	}
	if d.HasArg("from") {
		var v uint64
		d.ScanArgs(t, "from", &v)
		msg.From = &v
	}
	w := &traceWatcher{got: make(chan any, 1024)}
	props := actors.Props(func() actor.Actor { return &traceWatcherActor{got: w.got} },
		actors.MailboxConfig{Capacity: capacity, Policy: actors.DropNew}, func(m *actors.Mailbox) { w.mb = m })
	tr.ts.sys.Root.Spawn(props)
	msg.Feeder = w.mb
	res, err := tr.ts.sys.Root.RequestFuture(tr.ts.ref.PID, msg, eventTimeout).Result()
	if err != nil {
		d.Fatalf(t, "add watcher: %v", err)
	}
	added := res.(*WatcherAdded)
	if added.Err != nil {
		return fmt.Sprintf("refused: %v\n", added.Err)
	}
	tr.watchers[id] = w
	var b strings.Builder
	fmt.Fprintf(&b, "resume %d, resumable from %d", added.Resume, added.ResumableFrom)
	if added.Resnapshot {
		b.WriteString(", resnapshot")
	}
	if added.Retained > 0 {
		fmt.Fprintf(&b, ", %d retained", added.Retained)
	}
	b.WriteString("\n")
	for _, env := range added.Backlog {
		b.WriteString(showWatchEnvelope(t, env))
	}
	return b.String()
}

func (tr *watchTrace) write(t *testing.T, d *datadriven.TestData) string {
	var op CacheOp
	var key string
	d.ScanArgs(t, "key", &key)
	switch d.Cmd {
	case "put":
		var value string
		d.MaybeScanArgs(t, "value", &value)
		op = put(key, value)
		if d.HasArg("ttl") {
			var ttl string
			d.ScanArgs(t, "ttl", &ttl)
			dur, err := time.ParseDuration(ttl)
			if err != nil {
				d.Fatalf(t, "ttl: %v", err)
			}
			op.TTL = dur
		}
		if d.HasArg("if-absent") {
			op.Record.Cond = cache.Cond{Kind: cache.CondAbsent}
		}
	case "del":
		op = CacheOp{Record: cache.Record{Kind: cache.KindDelete, Key: key}}
	case "commit":
		op = CacheOp{Record: cache.Record{Kind: cache.KindCommit}}
		var ops []string
		d.ScanArgs(t, "ops", &ops)
		for _, o := range ops {
			if k, ok := strings.CutPrefix(o, "-"); ok {
				op.Record.Ops = append(op.Record.Ops, cache.Op{Key: k, Delete: true})
				continue
			}
			k, v, _ := strings.Cut(o, "=")
			op.Record.Ops = append(op.Record.Ops, cache.Op{Key: k, Value: []byte(v)})
		}
		var event string
		d.MaybeScanArgs(t, "event", &event)
		op.Record.Event = []byte(event)
	}
	if d.HasArg("if-version") {
		var v uint64
		d.ScanArgs(t, "if-version", &v)
		op.Record.Cond = cache.Cond{Kind: cache.CondVersion, Version: v}
	}
	res := tr.ts.write(t, op)
	switch {
	case res.Err != nil:
		return fmt.Sprintf("error: %v\n", res.Err)
	case res.Cache.Err != nil:
		return fmt.Sprintf("@%d refused: %v\n", res.Base, res.Cache.Err)
	}
	return fmt.Sprintf("@%d applied\n", res.Base)
}

// events shows what the watcher took since the last events: everything
// the shard queued for it before the marker.
func (tr *watchTrace) events(t *testing.T, d *datadriven.TestData) string {
	w := tr.watcher(t, d)
	tr.ts.read(t, &CacheGet{Key: ""}) // what the shard offered is queued
	var b strings.Builder
	for posted := false; ; {
		if !posted {
			switch w.mb.TryPost(&watchMarker{}, 0) {
			case actors.Posted:
				posted = true
			case actors.Closed:
				d.Fatalf(t, "watcher's mailbox closed")
			}
		}
		select {
		case m := <-w.got:
			switch m := m.(type) {
			case *watchMarker:
				if b.Len() == 0 {
					return "none\n"
				}
				return b.String()
			case *SubscriberEvicted:
				fmt.Fprintf(&b, "lagged: resume from %d\n", m.ResumeFrom)
			case *Envelope:
				tr.taken[m]++
				b.WriteString(showWatchEnvelope(t, m))
			}
		case <-time.After(eventTimeout):
			d.Fatalf(t, "watcher took nothing for %s", eventTimeout)
		}
	}
}

func showWatchEnvelope(t *testing.T, env *Envelope) string {
	ev, err := wire.DecodeCacheWatchEvent(env.Payloads[0])
	if err != nil {
		t.Fatalf("watch envelope at %d: %v", env.Base, err)
	}
	var flags string
	if ev.Flags&wire.WatchFlagRetained != 0 {
		flags += " retained"
	}
	if ev.Flags&wire.WatchFlagCommit != 0 {
		flags += " commit"
	}
	value := ""
	if ev.Kind == wire.WatchPut || ev.Kind == wire.WatchCommitEvent {
		value = fmt.Sprintf(" %q", ev.Value)
	}
	key := ev.Key
	if key != "" {
		key = " " + key
	}
	return fmt.Sprintf("@%d %s%s%s%s (resume %d)\n", ev.Version, ev.Kind, key, value, flags, env.Resume)
}
