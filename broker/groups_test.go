package broker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/config"
	"github.com/getfelix/felix-go/wire"
)

// groupFixture is a broker with a durable stream of n records and a group
// at its start.
type groupFixture struct {
	cfg config.Config
	b   *broker.Broker
	c   *client.Client
	st  client.Stream
}

func newGroupFixture(t *testing.T, ctx context.Context, cfg config.Config, records int) *groupFixture {
	t.Helper()
	b := brokertest.Start(t, cfg)
	f := &groupFixture{cfg: cfg, b: b, c: brokertest.Dial(t, b, cfg), st: client.Stream{Name: "jobs"}}
	if _, err := f.c.CreateStream(ctx, f.st, client.StreamConfig{Durable: true}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	f.publish(t, ctx, 0, records)
	if _, err := f.c.CreateGroup(ctx, f.st, "workers", client.GroupStart{Kind: "earliest"}); err != nil {
		t.Fatalf("create group: %v", err)
	}
	return f
}

// publish writes records "job-<i>" for i in [from, from+n).
func (f *groupFixture) publish(t *testing.T, ctx context.Context, from, n int) {
	t.Helper()
	for i := from; i < from+n; i += 100 {
		var batch [][]byte
		for j := i; j < min(i+100, from+n); j++ {
			batch = append(batch, []byte(fmt.Sprintf("job-%d", j)))
		}
		if _, err := f.c.PublishResult(ctx, f.st, batch, client.PublishOptions{Ack: wire.AckPerBatch}); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
}

func offsets(recs []client.GroupRecord) []uint64 {
	out := make([]uint64, len(recs))
	for i, r := range recs {
		out[i] = r.Offset
	}
	return out
}

// TestGroupPollAckNack: records are handed out once each, in order; a
// nacked one comes back first with attempts 2; the cursor advances only
// over a contiguous settled run; describe reports it.
func TestGroupPollAckNack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := newGroupFixture(t, ctx, brokertest.Config(t), 10)
	g := f.c.Group(f.st, "workers", client.GroupOptions{Consumer: "w1"})
	defer g.Close()

	recs, err := g.Poll(ctx, 4, 0)
	if err != nil || !slices.Equal(offsets(recs), []uint64{0, 1, 2, 3}) || recs[0].Attempts != 1 || string(recs[2].Payload) != "job-2" {
		t.Fatalf("first poll: %+v, %v", recs, err)
	}
	// Ack 1 and 2 but not 0: the cursor stays at 0.
	if err := g.Ack(ctx, recs[1], recs[2]); err != nil {
		t.Fatalf("ack: %v", err)
	}
	if err := g.Nack(ctx, 0, recs[0]); err != nil {
		t.Fatalf("nack: %v", err)
	}
	info, err := f.c.DescribeGroup(ctx, f.st, "workers")
	if err != nil || info.Shards[0].Cursor != 0 || info.Shards[0].InFlight != 1 || info.Shards[0].Owed != 1 {
		t.Fatalf("describe after partial acks: %+v, %v", info, err)
	}
	more, err := g.Poll(ctx, 3, 0)
	if err != nil || !slices.Equal(offsets(more), []uint64{0, 4, 5}) || more[0].Attempts != 2 || more[1].Attempts != 1 {
		t.Fatalf("second poll (the nacked one first): %+v, %v", more, err)
	}
	if err := g.Ack(ctx, append(more, recs[3])...); err != nil {
		t.Fatalf("ack: %v", err)
	}
	rest, err := g.Poll(ctx, 100, 0)
	if err != nil || !slices.Equal(offsets(rest), []uint64{6, 7, 8, 9}) {
		t.Fatalf("last poll: %+v, %v", rest, err)
	}
	if err := g.Ack(ctx, rest...); err != nil {
		t.Fatalf("ack: %v", err)
	}
	info, err = f.c.DescribeGroup(ctx, f.st, "workers")
	if err != nil || info.Shards[0].Cursor != 10 || info.Shards[0].Lag != 0 || info.Shards[0].InFlight != 0 || !slices.Equal(info.Shards[0].Consumers, []string{"w1"}) {
		t.Fatalf("describe at the end: %+v, %v", info, err)
	}
	// The group actor is in the tree, under the groups supervisor, with
	// its bounded mailbox.
	var found bool
	for _, a := range f.b.Actors() {
		if a.Kind == "group" {
			found = a.Path == "felix/groups/default:default:jobs:workers:0" && a.Labels["group"] == "workers" &&
				a.Capacity == f.cfg.GroupQueueDepth && a.Policy == "drop_new"
			if !found {
				t.Fatalf("group actor in the tree: %+v", a)
			}
		}
	}
	if !found {
		t.Fatal("no group actor in the tree")
	}
	// A long poll with nothing left waits, and is answered by a publish.
	done := make(chan []client.GroupRecord, 1)
	go func() {
		recs, _ := g.Poll(ctx, 10, 10*time.Second)
		done <- recs
	}()
	f.publish(t, ctx, 10, 1)
	if recs := <-done; !slices.Equal(offsets(recs), []uint64{10}) {
		t.Fatalf("long poll: %+v", recs)
	}
}

// TestGroupBadInput: each bad request gets a typed error, and nothing is
// lost: the group and another group still hand out every record once.
func TestGroupBadInput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := brokertest.Config(t)
	f := newGroupFixture(t, ctx, cfg, 5)
	c := f.c
	if _, err := c.CreateGroup(ctx, f.st, "others", client.GroupStart{Kind: "earliest"}); err != nil {
		t.Fatal(err)
	}
	g := c.Group(f.st, "workers", client.GroupOptions{})
	defer g.Close()
	recs, err := g.Poll(ctx, 2, 0)
	if err != nil || len(recs) != 2 {
		t.Fatalf("poll: %+v, %v", recs, err)
	}
	if _, err := c.CreateStream(ctx, client.Stream{Name: "mem"}, client.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	unknown := c.Group(f.st, "nobody", client.GroupOptions{})
	defer unknown.Close()
	mem := c.Group(client.Stream{Name: "mem"}, "workers", client.GroupOptions{})
	defer mem.Close()
	for _, tc := range []struct {
		name string
		do   func() error
		want error
	}{
		{"ack never handed out", func() error { return g.Ack(ctx, client.GroupRecord{Offset: 4, Attempts: 1}) }, wire.ErrInvalidRequest},
		{"ack past the tail", func() error { return g.Ack(ctx, client.GroupRecord{Offset: 1 << 40, Attempts: 1}) }, wire.ErrInvalidRequest},
		{"ack twice", func() error {
			if err := g.Ack(ctx, recs[0]); err != nil {
				return err
			}
			return g.Ack(ctx, recs[0])
		}, &wire.Error{Code: wire.CodeStaleClaim}},
		{"ack a stale attempt", func() error { return g.Ack(ctx, client.GroupRecord{Offset: 1, Attempts: 7}) }, &wire.Error{Code: wire.CodeStaleClaim}},
		{"nack after nack", func() error {
			if err := g.Nack(ctx, time.Hour, recs[1]); err != nil {
				return err
			}
			return g.Nack(ctx, 0, recs[1])
		}, &wire.Error{Code: wire.CodeStaleClaim}},
		{"unknown group poll", func() error { _, err := unknown.Poll(ctx, 1, 0); return err }, wire.ErrNotFound},
		{"unknown group describe", func() error { _, err := c.DescribeGroup(ctx, f.st, "nobody"); return err }, wire.ErrNotFound},
		{"in-memory stream", func() error { _, err := mem.Poll(ctx, 1, 0); return err }, wire.ErrInvalidRequest},
		{"create on in-memory stream", func() error {
			_, err := c.CreateGroup(ctx, client.Stream{Name: "mem"}, "g", client.GroupStart{})
			return err
		}, wire.ErrInvalidRequest},
		{"unknown stream", func() error {
			_, err := c.CreateGroup(ctx, client.Stream{Name: "none"}, "g", client.GroupStart{})
			return err
		}, wire.ErrNotFound},
		{"seek past the tail", func() error {
			_, err := c.SeekGroup(ctx, f.st, "workers", client.GroupStart{Kind: "offset", Offset: 99})
			return err
		}, wire.ErrInvalidRequest},
		{"seek to no shard", func() error {
			_, err := c.SeekGroup(ctx, f.st, "workers", client.GroupStart{Kind: "offset", Shard: 3})
			return err
		}, wire.ErrNotFound},
		{"bad start", func() error { _, err := c.CreateGroup(ctx, f.st, "g", client.GroupStart{Kind: "sideways"}); return err }, wire.ErrInvalidRequest},
		{"bad group name", func() error { _, err := c.CreateGroup(ctx, f.st, "a/b", client.GroupStart{}); return err }, wire.ErrInvalidRequest},
		{"absurd poll", func() error { _, err := g.Poll(ctx, 1_000_000, 0); return err }, wire.ErrInvalidRequest},
		{"absurd wait", func() error { _, err := g.Poll(ctx, 1, time.Hour); return err }, wire.ErrInvalidRequest},
		{"absurd extension", func() error { return g.Extend(ctx, 48*time.Hour, recs[1]) }, wire.ErrInvalidRequest},
		{"reserved stream", func() error {
			_, err := c.PublishResult(ctx, client.Stream{Name: wire.GroupStreamPrefix + "jobs"}, [][]byte{[]byte("x")}, client.PublishOptions{Ack: wire.AckPerBatch})
			return err
		}, wire.ErrInvalidRequest},
	} {
		if err := tc.do(); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	checkNothingLost(t, ctx, f, g)
}

// checkNothingLost follows TestGroupBadInput: the state stream is not
// listed; "others" gets all 5 records; "workers" the 3 never handed out
// (1 waits for its nack's hour).
func checkNothingLost(t *testing.T, ctx context.Context, f *groupFixture, g *client.Group) {
	t.Helper()
	c := f.c
	list, err := c.ListStreams(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if wire.IsReservedStream(s.Stream.Name) {
			t.Errorf("listed the broker's own stream %s", s.Stream.Name)
		}
	}
	other := c.Group(f.st, "others", client.GroupOptions{})
	defer other.Close()
	if all, err := other.Poll(ctx, 10, 0); err != nil || !slices.Equal(offsets(all), []uint64{0, 1, 2, 3, 4}) {
		t.Fatalf("other group: %+v, %v", all, err)
	}
	if rest, err := g.Poll(ctx, 10, 0); err != nil || !slices.Equal(offsets(rest), []uint64{2, 3, 4}) {
		t.Fatalf("group after bad input: %+v, %v", rest, err)
	}
	names, err := c.ListGroups(ctx, f.st)
	if err != nil || !slices.Equal(names, []string{"others", "workers"}) {
		t.Fatalf("list groups: %v, %v", names, err)
	}
}

// TestGroupVisibilityDeadLetters: a consumer that stops settling gets its
// records back after the visibility timeout with attempts one higher;
// after group_max_attempts they are dead letters; redrive hands them out
// again; discard forgets them. (Their surviving a restart:
// TestGroupStateSurvivesRestart.)
func TestGroupVisibilityDeadLetters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := brokertest.Config(t)
	cfg.GroupVisibilityTimeout = 200 * time.Millisecond
	cfg.GroupMaxAttempts = 3
	f := newGroupFixture(t, ctx, cfg, 3)
	g := f.c.Group(f.st, "workers", client.GroupOptions{})
	defer g.Close()

	for attempt := uint32(1); attempt <= 3; attempt++ {
		start := time.Now()
		// Each poll waits for the previous claims to expire: no sleep.
		recs, err := g.Poll(ctx, 10, 5*time.Second)
		if err != nil || !slices.Equal(offsets(recs), []uint64{0, 1, 2}) {
			t.Fatalf("attempt %d: %+v, %v", attempt, recs, err)
		}
		for _, r := range recs {
			if r.Attempts != attempt {
				t.Fatalf("attempt %d: record %d has attempts %d", attempt, r.Offset, r.Attempts)
			}
		}
		if attempt > 1 && time.Since(start) < 100*time.Millisecond {
			t.Fatalf("attempt %d came back after %s, before the visibility timeout", attempt, time.Since(start))
		}
	}
	// The third claim expires: each record had its last attempt.
	brokertest.Eventually(t, ctx, "3 dead letters", func() bool {
		dead, _, err := f.c.DeadLetters(ctx, f.st, "workers", 0, 0, 100)
		return err == nil && slices.Equal(dead, []uint64{0, 1, 2})
	})
	if recs, err := g.Poll(ctx, 10, 300*time.Millisecond); err != nil || len(recs) != 0 {
		t.Fatalf("dead letters were handed out: %+v, %v", recs, err)
	}
	info, err := f.c.DescribeGroup(ctx, f.st, "workers")
	if err != nil || info.Shards[0].Cursor != 3 || info.Shards[0].DeadLetters != 3 {
		t.Fatalf("describe: %+v, %v", info, err)
	}
	// Each record was handed out 3 times: 2 redeliveries each.
	if dead, again := brokertest.Value(t, f.b, "felix_group_dead_letters_total", "tenant", "default"),
		brokertest.Value(t, f.b, "felix_group_redeliveries_total", "tenant", "default"); dead != 3 || again != 6 {
		t.Fatalf("metrics: %v dead letters, %v redeliveries; want 3 and 6", dead, again)
	}
	n, err := f.c.Redrive(ctx, f.st, "workers", 0, []uint64{1}, false)
	if err != nil || n != 1 {
		t.Fatalf("redrive: %d, %v", n, err)
	}
	recs, err := g.Poll(ctx, 10, time.Second)
	if err != nil || !slices.Equal(offsets(recs), []uint64{1}) || recs[0].Attempts != 1 {
		t.Fatalf("redriven: %+v, %v", recs, err)
	}
	if err := g.Ack(ctx, recs...); err != nil {
		t.Fatalf("ack redriven: %v", err)
	}
	if n, err := f.c.DiscardDeadLetters(ctx, f.st, "workers", 0, []uint64{2}, false); err != nil || n != 1 {
		t.Fatalf("discard: %d, %v", n, err)
	}
	dead, _, err := f.c.DeadLetters(ctx, f.st, "workers", 0, 0, 100)
	if err != nil || !slices.Equal(dead, []uint64{0}) {
		t.Fatalf("dead letters after redrive and discard: %v, %v", dead, err)
	}
}

// TestGroupPollGone: a long poll whose caller gave up is dropped: a record
// published afterwards goes to the next consumer at once, attempt 1, not
// to nobody for a visibility timeout.
func TestGroupPollGone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := newGroupFixture(t, ctx, brokertest.Config(t), 0)
	waiting := func(n uint64) func() bool {
		return func() bool {
			info, err := f.c.DescribeGroup(ctx, f.st, "workers")
			return err == nil && info.Shards[0].Waiting == n
		}
	}
	g1 := f.c.Group(f.st, "workers", client.GroupOptions{})
	defer g1.Close()
	pctx, pcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := g1.Poll(pctx, 10, 20*time.Second)
		done <- err
	}()
	brokertest.Eventually(t, ctx, "the poll parked", waiting(1))
	pcancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled poll: %v", err)
	}
	brokertest.Eventually(t, ctx, "the poll dropped", waiting(0))
	f.publish(t, ctx, 0, 1)
	g2 := f.c.Group(f.st, "workers", client.GroupOptions{})
	defer g2.Close()
	recs, err := g2.Poll(ctx, 10, 5*time.Second)
	if err != nil || len(recs) != 1 || recs[0].Attempts != 1 {
		t.Fatalf("after a gone poll: %+v, %v", recs, err)
	}
}

// TestGroupStreamDeleted: deleting a stream deletes its groups; a consumer
// of the old group gets an error, never records of a stream made again
// under the same name.
func TestGroupStreamDeleted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := newGroupFixture(t, ctx, brokertest.Config(t), 3)
	g := f.c.Group(f.st, "workers", client.GroupOptions{})
	defer g.Close()
	if recs, err := g.Poll(ctx, 1, 0); err != nil || len(recs) != 1 {
		t.Fatalf("poll: %v, %v", recs, err)
	}
	if err := f.c.DeleteStream(ctx, f.st); err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.CreateStream(ctx, f.st, client.StreamConfig{Durable: true}); err != nil {
		t.Fatal(err)
	}
	f.publish(t, ctx, 100, 2)
	// The first poll may meet the old actor (its log closed: storage);
	// from then on the group is unknown.
	brokertest.Eventually(t, ctx, "the deleted group unknown", func() bool {
		recs, err := g.Poll(ctx, 10, 0)
		if len(recs) > 0 {
			t.Fatalf("records from the deleted group: %+v", recs)
		}
		return errors.Is(err, wire.ErrNotFound)
	})
	if names, err := f.c.ListGroups(ctx, f.st); err != nil || len(names) != 0 {
		t.Fatalf("groups of the new stream: %v, %v", names, err)
	}
}

// TestGroupPermissions: group.consume polls and settles; group.manage
// administers; stream rights alone do neither.
func TestGroupPermissions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := brokertest.Config(t)
	f := newGroupFixture(t, ctx, cfg, 2)
	dial := func(grant string) *client.Client {
		return brokertest.DialOptions(t, f.b, cfg, client.Options{Token: brokertest.Token(t, cfg, "default", grant)})
	}
	reader := dial("stream.subscribe:default/*")
	consumer := dial("group.consume:default/jobs")
	rg := reader.Group(f.st, "workers", client.GroupOptions{})
	defer rg.Close()
	if _, err := rg.Poll(ctx, 1, 0); !errors.Is(err, wire.ErrForbidden) {
		t.Fatalf("poll with stream.subscribe only: %v", err)
	}
	cg := consumer.Group(f.st, "workers", client.GroupOptions{})
	defer cg.Close()
	recs, err := cg.Poll(ctx, 1, 0)
	if err != nil || len(recs) != 1 {
		t.Fatalf("poll with group.consume: %v, %v", recs, err)
	}
	if err := cg.Ack(ctx, recs...); err != nil {
		t.Fatalf("ack with group.consume: %v", err)
	}
	if _, err := consumer.CreateGroup(ctx, f.st, "mine", client.GroupStart{}); !errors.Is(err, wire.ErrForbidden) {
		t.Fatalf("create with group.consume: %v", err)
	}
	if _, err := consumer.DescribeGroup(ctx, f.st, "workers"); !errors.Is(err, wire.ErrForbidden) {
		t.Fatalf("describe with group.consume: %v", err)
	}
}

// TestGroupRawBadInput: group requests a Go client would never send are
// answered with typed errors on the stream, which keeps serving.
func TestGroupRawBadInput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := brokertest.Config(t)
	f := newGroupFixture(t, ctx, cfg, 2)
	rc := brokertest.DialRaw(t, f.b, cfg)
	st, _ := rc.MustHandshake(t, ctx)
	target := func(id uint64) *wire.GroupSettle {
		return &wire.GroupSettle{RequestID: id, Tenant: "default", Namespace: "default", Stream: "jobs", Group: "workers"}
	}
	uneven := target(1)
	uneven.Op, uneven.Offsets, uneven.Attempts = wire.SettleAck, []uint64{0, 1}, []uint32{1}
	badOp := target(2)
	badOp.Op, badOp.Offsets, badOp.Attempts = "explode", []uint64{0}, []uint32{1}
	none := target(3)
	none.Op = wire.SettleAck
	for _, m := range []wire.Message{
		uneven, badOp, none,
		&wire.GroupPoll{RequestID: 4, Tenant: "default", Namespace: "default", Stream: "jobs", Group: "workers", MaxRecords: 1001},
		&wire.GroupCreate{RequestID: 5, Tenant: "default", Namespace: "default", Stream: "jobs", Group: "g", Start: "sideways"},
		&wire.GroupPoll{RequestID: 6, Tenant: "default", Namespace: "default", Stream: wire.GroupStreamPrefix + "jobs", Group: "workers"},
		&wire.GroupDescribe{RequestID: 8, Tenant: "default", Namespace: "default", Stream: "jobs", Group: "workers", OnlyShards: []uint32{0, 0}},
	} {
		if err := st.Send(m); err != nil {
			t.Fatal(err)
		}
		res, err := st.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("%s: %v", m.Type(), err)
		}
		if e, ok := res.(*wire.ErrorMsg); !ok || e.Code != wire.CodeInvalidRequest {
			t.Fatalf("%s answered %#v, want invalid_request", m.Type(), res)
		}
	}
	// only_shards names shards of the stream, and limits the answer to them.
	for _, c := range []struct {
		only []uint32
		want func(wire.Message) bool
	}{
		{[]uint32{3}, func(m wire.Message) bool { e, ok := m.(*wire.ErrorMsg); return ok && e.Code == wire.CodeNotFound }},
		{[]uint32{0}, func(m wire.Message) bool {
			i, ok := m.(*wire.GroupInfo)
			return ok && len(i.Shards) == 1 && i.Shards[0].Shard == 0
		}},
	} {
		if err := st.Send(&wire.GroupDescribe{RequestID: 9, Tenant: "default", Namespace: "default", Stream: "jobs", Group: "workers", OnlyShards: c.only}); err != nil {
			t.Fatal(err)
		}
		if res, err := st.ReadMessage(ctx); err != nil || !c.want(res) {
			t.Fatalf("describe only_shards %v: %#v, %v", c.only, res, err)
		}
	}
	// The stream still serves, and nothing was settled.
	if err := st.Send(&wire.GroupPoll{RequestID: 7, Tenant: "default", Namespace: "default", Stream: "jobs", Group: "workers", MaxRecords: 10}); err != nil {
		t.Fatal(err)
	}
	res, err := st.ReadMessage(ctx)
	if recs, ok := res.(*wire.GroupRecords); err != nil || !ok || !slices.Equal(recs.Offsets, []uint64{0, 1}) {
		t.Fatalf("poll after bad input: %#v, %v", res, err)
	}
}
