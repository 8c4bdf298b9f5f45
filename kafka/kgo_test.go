package kafka_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"go.uber.org/goleak"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/config"
	"github.com/getfelix/felix-go/internal/quicconf"
)

func TestMain(m *testing.M) {
	// protoactor's dead-letter throttle outlives ActorSystem.Shutdown by up
	// to a second (see broker/main_test.go).
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottle.func1.1"))
}

const topic = "kt.orders"

var stream = client.Stream{Namespace: "kt", Name: "orders"}

// kafkaConfig is a broker config with the Kafka listener on a free port.
func kafkaConfig(t testing.TB) config.Config {
	cfg := brokertest.Config(t)
	cfg.KafkaListen = "127.0.0.1:0"
	return cfg
}

// startBroker starts a broker that the caller stops (restart tests) or
// that stops when the test ends.
func startBroker(t testing.TB, cfg config.Config) *broker.Broker {
	t.Helper()
	b, err := broker.New(cfg)
	if err != nil {
		t.Fatalf("broker.New: %v", err)
	}
	if err := b.Start(); err != nil {
		t.Fatalf("broker.Start: %v", err)
	}
	t.Cleanup(func() { stopBroker(t, b) })
	return b
}

func stopBroker(t testing.TB, b *broker.Broker) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Stop(ctx); err != nil {
		t.Errorf("broker.Stop: %v", err)
	}
}

// dialFelix connects a felix/1 client as tenant default.
func dialFelix(t testing.TB, b *broker.Broker, cfg config.Config) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, b.Addr().String(), client.Options{CAFile: filepath.Join(cfg.DataDir, quicconf.CertFile), Token: brokertest.Token(t, cfg, "default")})
	if err != nil {
		t.Fatalf("client.Dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// createStream makes the durable stream behind topic.
func createStream(t *testing.T, b *broker.Broker, cfg config.Config, shards uint32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := dialFelix(t, b, cfg).CreateStream(ctx, stream, client.StreamConfig{Shards: shards, Durable: true}); err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
}

// kgoClient is a franz-go client authenticated with SASL/PLAIN as tenant
// default.
func kgoClient(t testing.TB, b *broker.Broker, cfg config.Config, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	base := []kgo.Opt{
		kgo.SeedBrokers(b.KafkaAddr().String()),
		kgo.SASL(plain.Auth{User: "default", Pass: brokertest.Token(t, cfg, "default")}.AsMechanism()),
		kgo.RetryTimeout(10 * time.Second),
	}
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

type acked struct {
	partition int32
	offset    int64
	value     string
	key       string // "" for none: every third record has none
	header    string // the value of header "h", "" for none
}

// ackedOf is r as the tests compare it.
func ackedOf(r *kgo.Record) acked {
	a := acked{partition: r.Partition, offset: r.Offset, value: string(r.Value), key: string(r.Key)}
	for _, h := range r.Headers {
		if h.Key == "h" {
			a.header = string(h.Value)
		}
	}
	return a
}

// produce sends n records spread over partitions with kgo's defaults
// (idempotent, acks=all) and returns what was acknowledged, by partition.
func produce(t *testing.T, cl *kgo.Client, first, n, partitions int) map[int32][]acked {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recs := make([]*kgo.Record, n)
	for i := range n {
		recs[i] = &kgo.Record{Topic: topic, Partition: int32((first + i) % partitions), Value: fmt.Appendf(nil, "value-%05d", first+i)}
		if i%3 != 0 {
			recs[i].Key = fmt.Appendf(nil, "key-%d", first+i)
			recs[i].Headers = []kgo.RecordHeader{{Key: "h", Value: fmt.Appendf(nil, "hv-%d", first+i)}, {Key: "empty"}}
		}
	}
	res := cl.ProduceSync(ctx, recs...)
	if err := res.FirstErr(); err != nil {
		t.Fatalf("produce %d records: %v", n, err)
	}
	out := make(map[int32][]acked)
	for _, r := range res {
		out[r.Record.Partition] = append(out[r.Record.Partition], ackedOf(r.Record))
	}
	return out
}

// consumeAll reads every partition from the start by assignment until it
// holds want records per partition.
func consumeAll(t *testing.T, b *broker.Broker, cfg config.Config, want map[int32]int) map[int32][]acked {
	t.Helper()
	assign := map[int32]kgo.Offset{}
	for p := range want {
		assign[p] = kgo.NewOffset().AtStart()
	}
	cl := kgoClient(t, b, cfg, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: assign}), kgo.FetchMaxWait(200*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := make(map[int32][]acked)
	done := func() bool {
		for p, n := range want {
			if len(got[p]) < n {
				return false
			}
		}
		return true
	}
	for !done() {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %v, want %v records per partition: %v", counts(got), want, ctx.Err())
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			got[r.Partition] = append(got[r.Partition], ackedOf(r))
		})
	}
	return got
}

func counts(m map[int32][]acked) map[int32]int {
	out := make(map[int32]int)
	for p, v := range m {
		out[p] = len(v)
	}
	return out
}

// checkOnceInOrder asserts that got holds every acknowledged record once,
// at its acknowledged offset, in order, and nothing else.
func checkOnceInOrder(t *testing.T, want, got map[int32][]acked) {
	t.Helper()
	checkSame(t, want, got)
	for p, w := range want {
		for i := range w {
			if int64(i) != w[i].offset {
				t.Fatalf("partition %d record %d acknowledged at offset %d, want %d (contiguous from 0)", p, i, w[i].offset, i)
			}
		}
	}
}

// checkSame asserts that got holds exactly want's records, in order.
func checkSame(t *testing.T, want, got map[int32][]acked) {
	t.Helper()
	for p, w := range want {
		g := got[p]
		if len(g) != len(w) {
			t.Fatalf("partition %d: read %d records, %d were acknowledged", p, len(g), len(w))
		}
		for i := range w {
			if g[i] != w[i] {
				t.Fatalf("partition %d record %d: read %+v, acknowledged %+v", p, i, g[i], w[i])
			}
		}
	}
}

// TestProduceConsumeAcrossRestart: kgo produces with its defaults
// (idempotent, acks=all) to a 3-shard durable stream; a consumer by
// assignment reads every acknowledged record once, in order per partition;
// felix/1 range reads see the same offsets and values; after a restart on
// the same data directory more records are produced and everything is
// read back again.
func TestProduceConsumeAcrossRestart(t *testing.T) {
	cfg := kafkaConfig(t)
	b := startBroker(t, cfg)
	createStream(t, b, cfg, 3)

	want := produce(t, kgoClient(t, b, cfg, kgo.RecordPartitioner(kgo.ManualPartitioner())), 0, 300, 3)
	checkOnceInOrder(t, want, consumeAll(t, b, cfg, map[int32]int{0: 100, 1: 100, 2: 100}))
	checkFelixRead(t, b, cfg, want)

	stopBroker(t, b)
	b = startBroker(t, cfg)
	more := produce(t, kgoClient(t, b, cfg, kgo.RecordPartitioner(kgo.ManualPartitioner())), 300, 150, 3)
	for p, recs := range more {
		want[p] = append(want[p], recs...)
	}
	checkOnceInOrder(t, want, consumeAll(t, b, cfg, map[int32]int{0: 150, 1: 150, 2: 150}))
	checkFelixRead(t, b, cfg, want)
}

// checkFelixRead reads each shard through felix/1 and compares offsets and
// values with what Kafka acknowledged.
func checkFelixRead(t *testing.T, b *broker.Broker, cfg config.Config, want map[int32][]acked) {
	t.Helper()
	c := dialFelix(t, b, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for p, w := range want {
		var got []client.Record
		for from := uint64(0); from < uint64(len(w)); {
			page, err := c.Read(ctx, stream, from, client.ReadOptions{Shard: uint32(p)})
			if err != nil {
				t.Fatalf("felix read shard %d at %d: %v", p, from, err)
			}
			got = append(got, page.Records...)
			if page.Next == from {
				break
			}
			from = page.Next
		}
		if len(got) != len(w) {
			t.Fatalf("shard %d: felix/1 read %d records, Kafka acknowledged %d", p, len(got), len(w))
		}
		for i, r := range got {
			f := acked{partition: p, offset: int64(r.Offset), value: string(r.Payload), key: string(r.Key)}
			for _, h := range r.Headers {
				if h.Key == "h" {
					f.header = string(h.Value)
				}
			}
			if f != w[i] || (w[i].key != "" && len(r.Headers) != 2) {
				t.Fatalf("shard %d record %d: felix/1 read %+v (headers %v), Kafka acknowledged %+v", p, i, f, r.Headers, w[i])
			}
		}
	}
}
