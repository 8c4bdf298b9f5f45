package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/getfelix/felix-go/client"
)

// benchValue is each record's value: 256 bytes, as in the issue's
// throughput comparisons.
var benchValue = make([]byte, 256)

// benchBatch is how many records one felix/1 Produce call carries; kgo
// batches by itself (up to 1 MiB per partition batch, 5 in flight).
const benchBatch = 64

// BenchmarkKafkaVsNative measures produce and consume throughput of b.N
// 256-byte records to one durable shard, through the Kafka listener with
// franz-go and through felix/1 with the Go client, in one run against one
// broker. Produce: kgo's defaults (idempotent, acks=all) against pipelined
// acked felix/1 Produce calls of 64 records. Consume: kgo by assignment
// from the start against felix/1 range reads (Client.Read pages).
func BenchmarkKafkaVsNative(b *testing.B) {
	for _, bc := range []struct {
		name string
		run  func(b *testing.B, env *benchEnv)
	}{
		{"produce/kafka", benchKafkaProduce},
		{"produce/felix1", benchNativeProduce},
		{"consume/kafka", benchKafkaConsume},
		{"consume/felix1", benchNativeConsume},
	} {
		b.Run(bc.name, func(b *testing.B) {
			env := newBenchEnv(b)
			b.SetBytes(int64(len(benchValue)))
			bc.run(b, env)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

type benchEnv struct {
	kafka func(opts ...kgo.Opt) *kgo.Client
	felix *client.Client
}

func newBenchEnv(b *testing.B) *benchEnv {
	cfg := kafkaConfig(b)
	br := startBroker(b, cfg)
	env := &benchEnv{felix: dialFelix(b, br, cfg)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := env.felix.CreateStream(ctx, stream, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		b.Fatal(err)
	}
	env.kafka = func(opts ...kgo.Opt) *kgo.Client { return kgoClient(b, br, cfg, opts...) }
	return env
}

func benchKafkaProduce(b *testing.B, env *benchEnv) {
	cl := env.kafka(kgo.DefaultProduceTopic(topic))
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		cl.Produce(ctx, &kgo.Record{Value: benchValue}, func(_ *kgo.Record, err error) {
			if err != nil {
				b.Error(err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
}

func benchNativeProduce(b *testing.B, env *benchEnv) {
	ctx := context.Background()
	batch := make([][]byte, benchBatch)
	for i := range batch {
		batch[i] = benchValue
	}
	b.ResetTimer()
	for sent := 0; sent < b.N; sent += benchBatch {
		n := min(benchBatch, b.N-sent)
		if err := env.felix.Produce(ctx, stream, batch[:n], client.PublishOptions{}, func(_ client.PublishResult, err error) {
			if err != nil {
				b.Error(err)
			}
		}); err != nil {
			b.Fatal(err)
		}
	}
	if err := env.felix.Flush(ctx); err != nil {
		b.Fatal(err)
	}
}

// fill writes b.N records through felix/1 before a consume benchmark.
func fill(b *testing.B, env *benchEnv) {
	b.StopTimer()
	defer b.StartTimer()
	benchNativeProduce(b, env)
}

func benchKafkaConsume(b *testing.B, env *benchEnv) {
	fill(b, env)
	cl := env.kafka(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b.ResetTimer()
	for got := 0; got < b.N; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			b.Fatalf("consumed %d of %d", got, b.N)
		}
		got += fs.NumRecords()
	}
}

func benchNativeConsume(b *testing.B, env *benchEnv) {
	fill(b, env)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b.ResetTimer()
	for from := uint64(0); from < uint64(b.N); {
		page, err := env.felix.Read(ctx, stream, from, client.ReadOptions{})
		if err != nil {
			b.Fatal(err)
		}
		from = page.Next
	}
}
