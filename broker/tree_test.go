package broker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
)

// Tests of the supervision tree as Broker.Actors() and GET /debug/actors
// show it. Shared by chaos_test.go: debugActors, adminPost, pollFor,
// metricSum, actorAt; and by diskfull_test.go: httpGet.

// TestTreeActors: one publisher and two subscribers on their own
// connections; the tree lists exactly the supervisors, the shard, both
// feeders, every lane and one writer per connection, each under its
// supervisor with the mailbox bounds the config asked for.
func TestTreeActors(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.Admin = "127.0.0.1:0"
	// Not the defaults, so the tree shows what was configured, not what
	// happens to be the default.
	cfg.PubQueueDepth = 16
	cfg.SubscriberQueueCapacity = 100
	cfg.SubscriberQueueMaxBytes = 1 << 20
	cfg.SubscriberQueuePolicy = "drop_old"
	cfg.SubscriberWriterLanes = 3
	cfg.SubscriberLaneQueueDepth = 32
	cfg.SubscriberLaneQueuePolicy = "block"
	b := brokertest.Start(t, cfg)
	ctx := testCtx(t, 30*time.Second)

	pubc := brokertest.Dial(t, b, cfg)
	c1 := brokertest.Dial(t, b, cfg)
	c2 := brokertest.Dial(t, b, cfg)
	st := client.Stream{Name: "tree"}
	s1, err := c1.Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		t.Fatalf("subscribe 1: %v", err)
	}
	s2, err := c2.Subscribe(ctx, st, client.SubscribeOptions{QueueCapacity: 40})
	if err != nil {
		t.Fatalf("subscribe 2: %v", err)
	}
	if err := pubc.Publish(ctx, st, []byte("hello"), client.PublishOptions{}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	expectNext(t, ctx, "subscriber 1", s1, "hello")
	expectNext(t, ctx, "subscriber 2", s2, "hello")

	check := func(t *testing.T, list []broker.ActorInfo) {
		byPath := make(map[string]broker.ActorInfo, len(list))
		byKind := make(map[string][]broker.ActorInfo)
		for i, a := range list {
			if _, dup := byPath[a.Path]; dup {
				t.Errorf("%s listed twice", a.Path)
			}
			byPath[a.Path] = a
			byKind[a.Kind] = append(byKind[a.Kind], a)
			if i > 0 && list[i-1].Path >= a.Path {
				t.Errorf("not sorted by path: %s before %s", list[i-1].Path, a.Path)
			}
			if a.Restarts != 0 || a.LastFailure != nil {
				t.Errorf("%s: restarts %d, last failure %+v; nothing failed", a.Path, a.Restarts, a.LastFailure)
			}
		}
		if t.Failed() {
			return
		}
		// Parents come before children: every non-supervisor's parent is a
		// listed supervisor of the right kind, and listed earlier.
		childKind := map[string]string{
			"felix/streams": "shard", "felix/subscribers": "feeder",
			"felix/lanes": "lane", "felix/connections": "connection_writer",
			"felix/sessions": "session",
		}
		for path, kind := range childKind {
			sup, ok := byPath[path]
			if !ok {
				t.Errorf("supervisor %s not listed; tree:\n%s", path, treeDump(list))
				continue
			}
			if sup.Kind != "supervisor" || sup.Parent != "felix" || sup.Labels["children"] != kind {
				t.Errorf("%s = kind %q, parent %q, labels %v; want a supervisor under felix with children=%s", path, sup.Kind, sup.Parent, sup.Labels, kind)
			}
			if sup.Capacity != 4096 || sup.Policy != "block" {
				t.Errorf("%s mailbox: capacity %d, policy %q; want 4096, block", path, sup.Capacity, sup.Policy)
			}
		}
		for _, a := range list {
			if a.Kind == "supervisor" {
				continue
			}
			if a.Kind == "registry" {
				if a.Path != "felix/registry" || a.Parent != "felix" {
					t.Errorf("registry at %s under %q, want felix/registry under felix", a.Path, a.Parent)
				}
				continue
			}
			want := map[string]string{"shard": "felix/streams", "feeder": "felix/subscribers", "lane": "felix/lanes", "connection_writer": "felix/connections", "session": "felix/sessions"}[a.Kind]
			if want == "" {
				t.Errorf("%s has unexpected kind %q", a.Path, a.Kind)
				continue
			}
			if a.Parent != want || !strings.HasPrefix(a.Path, want+"/") {
				t.Errorf("%s (%s): parent %q, want %q", a.Path, a.Kind, a.Parent, want)
			}
		}

		shards := byKind["shard"]
		if len(shards) != 1 {
			t.Fatalf("%d shards, want 1; tree:\n%s", len(shards), treeDump(list))
		}
		sh := shards[0]
		if sh.Path != "felix/streams/default:default:tree:0" || sh.Labels["stream"] != "default/default/tree" || sh.Labels["shard"] != "0" {
			t.Errorf("shard = %s labels %v; want felix/streams/default:default:tree:0 with stream=default/default/tree shard=0", sh.Path, sh.Labels)
		}
		if sh.Capacity != cfg.PubQueueDepth || sh.Policy != "block" {
			t.Errorf("shard mailbox: capacity %d, policy %q; want pub_queue_depth %d, block", sh.Capacity, sh.Policy, cfg.PubQueueDepth)
		}

		feeders := byKind["feeder"]
		if len(feeders) != 2 {
			t.Fatalf("%d feeders, want 2; tree:\n%s", len(feeders), treeDump(list))
		}
		lanes := byKind["lane"]
		if len(lanes) != cfg.SubscriberWriterLanes {
			t.Errorf("%d lanes, want subscriber_writer_lanes %d", len(lanes), cfg.SubscriberWriterLanes)
		}
		for i, l := range lanes {
			if want := fmt.Sprintf("felix/lanes/lane-%d", i); l.Path != want || l.Labels["lane"] != fmt.Sprint(i) {
				t.Errorf("lane %d = %s labels %v, want %s with lane=%d", i, l.Path, l.Labels, want, i)
			}
			if l.Capacity != cfg.SubscriberLaneQueueDepth || l.Policy != cfg.SubscriberLaneQueuePolicy {
				t.Errorf("%s mailbox: capacity %d, policy %q; want %d, %s", l.Path, l.Capacity, l.Policy, cfg.SubscriberLaneQueueDepth, cfg.SubscriberLaneQueuePolicy)
			}
		}
		writers := byKind["connection_writer"]
		if len(writers) != 3 {
			t.Errorf("%d connection writers, want 3 (one per connection); tree:\n%s", len(writers), treeDump(list))
		}
		conns := map[string]bool{}
		for _, w := range writers {
			conn := w.Labels["conn"]
			if w.Path != "felix/connections/conn-"+conn || conns[conn] {
				t.Errorf("connection writer %s has conn=%q (seen before: %v)", w.Path, conn, conns[conn])
			}
			conns[conn] = true
			if w.Labels["tenant"] != "default" || w.Labels["remote"] == "" {
				t.Errorf("%s labels %v: want tenant=default and a remote", w.Path, w.Labels)
			}
			if w.Capacity != 4096 || w.Policy != "block" {
				t.Errorf("%s mailbox: capacity %d, policy %q; want 4096, block", w.Path, w.Capacity, w.Policy)
			}
		}

		feederConns := map[string]bool{}
		for _, s := range []struct {
			sub      *client.Subscription
			capacity int
		}{{s1, cfg.SubscriberQueueCapacity}, {s2, 40}} {
			path := fmt.Sprintf("felix/subscribers/sub-%d", s.sub.ID())
			f, ok := byPath[path]
			if !ok {
				t.Errorf("feeder %s (subscription %d) not listed; tree:\n%s", path, s.sub.ID(), treeDump(list))
				continue
			}
			if f.Kind != "feeder" || f.Labels["subscription"] != fmt.Sprint(s.sub.ID()) || f.Labels["stream"] != "default/default/tree" {
				t.Errorf("%s = kind %q labels %v; want a feeder with subscription=%d stream=default/default/tree", path, f.Kind, f.Labels, s.sub.ID())
			}
			if f.Capacity != s.capacity || s.sub.QueueCapacity() != s.capacity || f.MaxBytes != cfg.SubscriberQueueMaxBytes ||
				f.Policy != cfg.SubscriberQueuePolicy || f.Labels["policy"] != cfg.SubscriberQueuePolicy {
				t.Errorf("%s mailbox: capacity %d (granted %d), max bytes %d, policy %q/%q; want %d, %d, %s",
					path, f.Capacity, s.sub.QueueCapacity(), f.MaxBytes, f.Policy, f.Labels["policy"], s.capacity, cfg.SubscriberQueueMaxBytes, cfg.SubscriberQueuePolicy)
			}
			if !conns[f.Labels["conn"]] {
				t.Errorf("%s conn=%q is no listed connection writer's", path, f.Labels["conn"])
			}
			feederConns[f.Labels["conn"]] = true
			if _, ok := byPath["felix/lanes/lane-"+f.Labels["lane"]]; !ok {
				t.Errorf("%s lane=%q is no listed lane", path, f.Labels["lane"])
			}
		}
		if len(feederConns) != 2 {
			t.Errorf("the two feeders name %d connections, want 2 (they subscribed on two)", len(feederConns))
		}
		// 7 top-level: the six supervisors (groups' included) and
		// felix/registry (stream definitions); 3 connections have a writer
		// and a session each.
		if want := 7 + 1 + 2 + cfg.SubscriberWriterLanes + 3 + 3; len(list) != want {
			t.Errorf("%d actors listed, want %d; tree:\n%s", len(list), want, treeDump(list))
		}
	}

	t.Run("Actors", func(t *testing.T) { check(t, b.Actors()) })
	t.Run("GET /debug/actors", func(t *testing.T) { check(t, debugActors(t, ctx, b, "")) })
	t.Run("kind filter", func(t *testing.T) {
		for kind, want := range map[string]int{"feeder": 2, "lane": cfg.SubscriberWriterLanes, "shard": 1, "connection_writer": 3, "session": 3, "supervisor": 6, "registry": 1, "nonsense": 0} {
			got := debugActors(t, ctx, b, kind)
			if len(got) != want {
				t.Errorf("?kind=%s listed %d actors, want %d:\n%s", kind, len(got), want, treeDump(got))
			}
			for _, a := range got {
				if a.Kind != kind {
					t.Errorf("?kind=%s listed %s of kind %s", kind, a.Path, a.Kind)
				}
			}
		}
	})
}

// TestTreeLiveMailboxDepth: the depth shown is the live one. A subscriber
// that never reads (a one-event client buffer) and a small egress budget
// leave its feeder holding its queue, so what is published next stays
// queued and shows as mailbox_depth > 0, both in Actors() and over HTTP.
func TestTreeLiveMailboxDepth(t *testing.T) {
	cfg := brokertest.Config(t)
	cfg.Admin = "127.0.0.1:0"
	cfg.SubscriberEgressMaxBytes = 32 << 10
	b := brokertest.Start(t, cfg)
	ctx := testCtx(t, 60*time.Second)

	frozen := brokertest.DialOptions(t, b, cfg, client.Options{SubscriptionBuffer: 1})
	pubc := brokertest.Dial(t, b, cfg)
	st := client.Stream{Name: "frozen"}
	sub, err := frozen.Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	path := fmt.Sprintf("felix/subscribers/sub-%d", sub.ID())
	depth := func() int {
		a, ok := brokertest.ActorAt(b, path)
		if !ok {
			t.Fatalf("feeder %s not listed", path)
		}
		return a.MailboxDepth
	}

	// The shard acks a publish once the batch is in the feeder's mailbox, so
	// after each ack the depth is current. While the feeder drains, a backlog
	// comes and goes; once the stream's QUIC window (quicconf.QUICConfig;
	// not auto-tuned, as the client reads nothing) and the 32 KiB egress
	// budget are full, the feeder holds and every publish adds one to the
	// depth for good. The cap is far above any window.
	payload := bytes.Repeat([]byte("x"), 16<<10)
	publish := func() {
		t.Helper()
		if err := pubc.Publish(ctx, st, payload, client.PublishOptions{}); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	published := 0
	for ; depth() < 20; published++ {
		if published == 2000 {
			t.Fatalf("after %d publishes of %d bytes the frozen subscriber's feeder shows depth %d", published, len(payload), depth())
		}
		publish()
	}
	// Held: nothing drains, so each further publish shows as one more.
	d0 := depth()
	for range 5 {
		publish()
	}
	published += 5
	direct, _ := brokertest.ActorAt(b, path)
	if direct.MailboxDepth != d0+5 || direct.MailboxBytes < int64(direct.MailboxDepth)*int64(len(payload)) || direct.PeakBytes < direct.MailboxBytes {
		t.Errorf("Actors(): %s depth %d, bytes %d, peak %d after %d publishes; want depth %d+5 = %d, bytes >= depth x %d, peak >= bytes",
			path, direct.MailboxDepth, direct.MailboxBytes, direct.PeakBytes, published, d0, d0+5, len(payload))
	}
	list := debugActors(t, ctx, b, "feeder")
	if len(list) != 1 || list[0].Path != path {
		t.Fatalf("?kind=feeder listed %s, want just %s", treeDump(list), path)
	}
	if a := list[0]; a.MailboxDepth != direct.MailboxDepth || a.MailboxBytes != direct.MailboxBytes || a.Capacity != cfg.SubscriberQueueCapacity {
		t.Errorf("/debug/actors: %s mailbox_depth %d, mailbox_bytes %d, capacity %d; want %d, %d (as Actors() showed, nothing drains), capacity %d",
			path, a.MailboxDepth, a.MailboxBytes, a.Capacity, direct.MailboxDepth, direct.MailboxBytes, cfg.SubscriberQueueCapacity)
	}
	t.Logf("feeder held after %d publishes of %d bytes; depth %d, %d bytes queued", published, len(payload), direct.MailboxDepth, direct.MailboxBytes)
}

// --- helpers shared with chaos_test.go ---

// debugActors is GET /debug/actors (?kind=kind unless empty) with the
// admin token b wrote.
func debugActors(t *testing.T, ctx context.Context, b *broker.Broker, kind string) []broker.ActorInfo {
	t.Helper()
	return brokertest.DebugActors(t, ctx, b, b.Config(), kind)
}

// adminPost posts body (JSON-encoded unless it is a string) to path and
// returns the status and the decoded JSON answer.
func adminPost(t *testing.T, ctx context.Context, b *broker.Broker, path string, body any) (int, map[string]any) {
	t.Helper()
	var raw []byte
	if s, ok := body.(string); ok {
		raw = []byte(s)
	} else {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, brokertest.AdminURL(t, b, path), bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token := b.AdminToken(); token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	var res map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		t.Fatalf("POST %s %s: %s: answer is not JSON: %v", path, raw, resp.Status, err)
	}
	return resp.StatusCode, res
}

// pollFor polls cond every 2 ms until it holds, failing t (naming what)
// after d. Only for states that no event announces, such as a restart
// count appearing in Actors() or an actor leaving it.
func pollFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", d, what)
		}
		<-tick.C
	}
}

// metricSum sums every series of the metric called name whose labels
// include the given name/value pairs (0 when none has been touched yet).
func metricSum(t *testing.T, b *broker.Broker, name string, labels ...string) float64 {
	t.Helper()
	families, err := b.Metrics().Registry.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	var sum float64
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					found = found || (lp.GetName() == labels[i] && lp.GetValue() == labels[i+1])
				}
				if !found {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// treeDump prints a list of actors one per line, for failure messages.
func treeDump(list []broker.ActorInfo) string {
	var sb strings.Builder
	for _, a := range list {
		fmt.Fprintf(&sb, "  %s [%s] depth %d/%d %s restarts %d labels %v\n", a.Path, a.Kind, a.MailboxDepth, a.Capacity, a.Policy, a.Restarts, a.Labels)
	}
	return sb.String()
}
