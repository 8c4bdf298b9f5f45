package admin_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/getfelix/felix-go/admin"
	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/config"
)

// Tests of the JSON routes behind the pages: GET /debug/stream (the
// stream page) and the cluster fallback the tree page relies on.

// adminBroker starts a broker with its admin endpoint on a free port,
// under auth (the tests' default, jwt, when empty).
func adminBroker(t *testing.T, auth string) (*broker.Broker, config.Config) {
	t.Helper()
	cfg := brokertest.Config(t)
	cfg.Admin = "127.0.0.1:0"
	if auth != "" {
		cfg.Auth = auth
	}
	return brokertest.Start(t, cfg), cfg
}

// adminGet is GET path with token (none when empty), decoding a 200's
// body into out; it returns the status and the raw body.
func adminGet(t *testing.T, b *broker.Broker, token, path string, out any) (int, string) {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	res, body := adminFetch(t, hc, b, token, path)
	if res.StatusCode == http.StatusOK && out != nil {
		if err := json.Unmarshal([]byte(body), out); err != nil {
			t.Fatalf("GET %s: %v in %s", path, err, body)
		}
	}
	return res.StatusCode, body
}

// adminFetch is GET path through hc, with token when not empty; it
// returns the answer (its body read and closed) and its body.
func adminFetch(t *testing.T, hc *http.Client, b *broker.Broker, token, path string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, brokertest.AdminURL(t, b, path), nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return res, string(body)
}

func streamPath(name string) string {
	return "/debug/stream?" + url.Values{"tenant": {"default"}, "ns": {"default"}, "stream": {name}}.Encode()
}

// TestUIStreamRouteAuth: /debug/stream needs node.view like /debug/actors:
// 401 without a token, 403 with a token of stream rights only; bad names
// are 400; an unknown stream is 404 and is not made by being looked at.
func TestUIStreamRouteAuth(t *testing.T) {
	b, cfg := adminBroker(t, "")
	view := brokertest.Token(t, cfg, "default", "node.view:*")
	if status, body := adminGet(t, b, "", streamPath("s"), nil); status != http.StatusUnauthorized {
		t.Errorf("without a token: %d %s; want 401", status, body)
	}
	streamOnly := brokertest.Token(t, cfg, "default", "stream.manage:*/*")
	if status, body := adminGet(t, b, streamOnly, streamPath("s"), nil); status != http.StatusForbidden {
		t.Errorf("with a stream.manage token: %d %s; want 403", status, body)
	}
	for _, path := range []string{"/debug/stream", "/debug/stream?tenant=default&stream=a/b", streamPath("s") + "&from=x"} {
		if status, body := adminGet(t, b, view, path, nil); status != http.StatusBadRequest {
			t.Errorf("GET %s: %d %s; want 400", path, status, body)
		}
	}
	if status, body := adminGet(t, b, view, streamPath("ghost"), nil); status != http.StatusNotFound {
		t.Errorf("an unknown stream: %d %s; want 404", status, body)
	}
	ctx := brokertest.Context(t, 30*time.Second)
	c := brokertest.Dial(t, b, cfg)
	list, err := c.ListStreams(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if s.Stream.Name == "ghost" {
			t.Errorf("looking at stream ghost made it: %+v", s)
		}
	}
}

// TestUIStreamRouteDurable: a durable stream's document has every shard
// with its log offsets (next grows by what was published to it, committed
// follows), the shard's subscribers, and the group with a part per shard.
func TestUIStreamRouteDurable(t *testing.T) {
	b, cfg := adminBroker(t, "")
	view := brokertest.Token(t, cfg, "default", "node.view:*")
	ctx := brokertest.Context(t, 30*time.Second)
	c := brokertest.Dial(t, b, cfg)
	st := ordersStream(t, ctx, c)
	const records = 40
	publishKeyed(t, ctx, c, st, records)

	var v admin.StreamView
	if status, body := adminGet(t, b, view, streamPath("orders"), &v); status != http.StatusOK {
		t.Fatalf("GET the stream: %d %s", status, body)
	}
	if v.Stream != "default/default/orders" || v.Shards != 2 || !v.Durable || len(v.ShardList) != 2 {
		t.Fatalf("stream document %+v; want default/default/orders, durable, 2 shards listed", v)
	}
	var total uint64
	for i, s := range v.ShardList {
		if s.Shard != uint32(i) || !s.Here || s.First == nil || s.Next == nil || s.Committed == nil || s.Actor == "" {
			t.Fatalf("shard %d: %+v; want its actor and offsets here", i, s)
		}
		if *s.Committed != *s.Next || *s.First != 0 {
			t.Errorf("shard %d offsets first %d next %d committed %d; want first 0, committed = next", i, *s.First, *s.Next, *s.Committed)
		}
		total += *s.Next
	}
	if total != records {
		t.Errorf("the shards' next offsets add up to %d, want %d published", total, records)
	}
	if v.ShardList[0].Subscribers != 0 || v.ShardList[1].Subscribers != 1 || len(v.ShardList[1].SubscriberList) != 1 {
		t.Errorf("subscribers %d and %d (%+v); want 0 on shard 0, 1 on shard 1", v.ShardList[0].Subscribers, v.ShardList[1].Subscribers, v.ShardList[1].SubscriberList)
	}
	if v.GroupCount != 1 || len(v.Groups) != 1 || v.Groups[0].Group != "billing" || len(v.Groups[0].Shards) != 2 {
		t.Fatalf("groups %d %+v; want billing with 2 shards", v.GroupCount, v.Groups)
	}
	for _, g := range v.Groups[0].Shards {
		if g.Committed != *v.ShardList[g.Shard].Committed || g.Lag != g.Committed {
			t.Errorf("group shard %+v; want committed %d and all of it lagging (nobody polled)", g, *v.ShardList[g.Shard].Committed)
		}
	}
}

// TestUIStreamRouteInMemory: an in-memory stream has no offsets to show;
// its document counts the records fanned out since the first look, the
// counter the page turns into the stream's rate.
func TestUIStreamRouteInMemory(t *testing.T) {
	b, cfg := adminBroker(t, "none")
	ctx := brokertest.Context(t, 30*time.Second)
	c := brokertest.Dial(t, b, cfg)
	st := client.Stream{Name: "ticks"}
	if _, err := c.CreateStream(ctx, st, client.StreamConfig{Shards: 3}); err != nil {
		t.Fatal(err)
	}
	publishKeyed(t, ctx, c, st, 5) // before anyone looked: not counted
	var before, after admin.StreamView
	if status, body := adminGet(t, b, "", streamPath("ticks"), &before); status != http.StatusOK {
		t.Fatalf("GET the stream: %d %s", status, body)
	}
	if before.Durable || len(before.ShardList) != 3 || before.Published == nil || *before.Published != 0 {
		t.Fatalf("first look %+v; want 3 in-memory shards and a counter at 0", before)
	}
	for _, s := range before.ShardList {
		if s.Next != nil || s.First != nil {
			t.Errorf("in-memory shard %d has offsets %+v", s.Shard, s)
		}
	}
	const records = 30
	publishKeyed(t, ctx, c, st, records)
	brokertest.Eventually(t, ctx, "the fan-out counted", func() bool {
		adminGet(t, b, "", streamPath("ticks"), &after)
		return after.Published != nil && *after.Published == records
	})
	if !after.SampledAt.After(before.SampledAt) {
		t.Errorf("sampled at %v then %v", before.SampledAt, after.SampledAt)
	}
}

// ordersStream makes the durable stream "orders" of two shards with the
// group "billing", and subscribes c to its shard 1.
func ordersStream(t *testing.T, ctx context.Context, c *client.Client) client.Stream {
	t.Helper()
	st := client.Stream{Name: "orders"}
	if _, err := c.CreateStream(ctx, st, client.StreamConfig{Shards: 2, Durable: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateGroup(ctx, st, "billing", client.GroupStart{Kind: "earliest"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Subscribe(ctx, st, client.SubscribeOptions{Shard: 1}); err != nil {
		t.Fatal(err)
	}
	return st
}

// publishKeyed publishes n records one by one, under keys that spread
// them over the stream's shards.
func publishKeyed(t *testing.T, ctx context.Context, c *client.Client, st client.Stream, n int) {
	t.Helper()
	for i := range n {
		if err := c.Publish(ctx, st, []byte(seq(i)), client.PublishOptions{Key: []byte(seq(i))}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestUIClusterRouteLoneBroker: a lone broker answers the cluster tree
// route 404 (the tree page then polls /debug/actors) and has no node id
// in the page's config.
func TestUIClusterRouteLoneBroker(t *testing.T) {
	b, cfg := adminBroker(t, "")
	view := brokertest.Token(t, cfg, "default", "node.view:*")
	if status, body := adminGet(t, b, "", "/debug/cluster/actors", nil); status != http.StatusUnauthorized {
		t.Errorf("cluster trees without a token: %d %s; want 401", status, body)
	}
	if status, body := adminGet(t, b, view, "/debug/cluster/actors", nil); status != http.StatusNotFound {
		t.Errorf("cluster trees of a lone broker: %d %s; want 404", status, body)
	}
	var ui struct {
		NodeID string `json:"node_id"`
	}
	if status, body := adminGet(t, b, "", "/ui/config", &ui); status != http.StatusOK || ui.NodeID != "" {
		t.Errorf("/ui/config: %d %s; want no node id", status, body)
	}
}
