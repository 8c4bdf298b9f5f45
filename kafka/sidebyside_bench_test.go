package kafka_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/getfelix/felix-go/client"
)

// sideRecord is each record of the side-by-side runs: 1 KiB, shaped like
// an application's JSON event (field names repeat, ids and a payload
// vary), so that compression has what real records give it, neither
// zeros nor noise.
func sideRecord(rng *rand.Rand, i int) []byte {
	const size = 1024
	b := fmt.Appendf(nil, `{"id":%d,"user":"user-%05d","event":"%s","region":"eu-west-%d","amount_cents":%d,"payload":"`,
		i, rng.IntN(50000), []string{"view", "click", "purchase", "refund"}[rng.IntN(4)], rng.IntN(3), rng.IntN(100000))
	const hex = "0123456789abcdef"
	for len(b) < size-2 {
		// Half the payload is a hex digest (incompressible beyond its
		// alphabet), half a repeated tag.
		if rng.IntN(2) == 0 {
			b = append(b, hex[rng.IntN(16)])
		} else {
			b = append(b, "tag"[len(b)%3])
		}
	}
	return append(b, '"', '}')
}

func sideRecords(n int) [][]byte {
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([][]byte, n)
	for i := range out {
		out[i] = sideRecord(rng, i)
	}
	return out
}

// BenchmarkKafkaFelix1SideBySide measures, in each iteration of b.N
// records, against one broker and one durable stream of one shard:
// produce through the Kafka listener (kgo, acks=all, idempotent, no
// compression, its own batching) and through felix/1 (the Go client's
// pipelined acked Produce calls of 64 records), then a fetch of the
// same b.N records from offset 0 by each (kgo by assignment; felix/1
// range reads). It reports each path's records/s and the ratios Kafka
// over felix/1; run it with -count 3 and take the medians
// (docs/BENCHMARKS.md).
func BenchmarkKafkaFelix1SideBySide(b *testing.B) {
	cfg := kafkaConfig(b)
	br := startBroker(b, cfg)
	felix := dialFelix(b, br, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := felix.CreateStream(ctx, stream, client.StreamConfig{Shards: 1, Durable: true}); err != nil {
		b.Fatal(err)
	}
	records := sideRecords(b.N)
	// Both clients are connected and logged in before the clock starts.
	producer := kgoClient(b, br, cfg, kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	consumer := kgoClient(b, br, cfg, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	for _, cl := range []*kgo.Client{producer, consumer} {
		if err := cl.Ping(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(2 * 2 * 1024) // each record is produced twice and fetched twice
	b.ResetTimer()

	kafkaProduce := timed(func() {
		cl := producer
		for _, v := range records {
			cl.Produce(ctx, &kgo.Record{Value: v}, func(_ *kgo.Record, err error) {
				if err != nil {
					b.Error(err)
				}
			})
		}
		if err := cl.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	})
	felixProduce := timed(func() {
		for sent := 0; sent < len(records); sent += benchBatch {
			batch := records[sent:min(sent+benchBatch, len(records))]
			if err := felix.Produce(ctx, stream, batch, client.PublishOptions{}, func(_ client.PublishResult, err error) {
				if err != nil {
					b.Error(err)
				}
			}); err != nil {
				b.Fatal(err)
			}
		}
		if err := felix.Flush(ctx); err != nil {
			b.Fatal(err)
		}
	})
	kafkaFetch := timed(func() {
		cl := consumer
		for got := 0; got < b.N; {
			fs := cl.PollFetches(ctx)
			if err := fs.Err(); err != nil {
				b.Fatalf("kgo fetch after %d of %d records: %v", got, b.N, err)
			}
			got += fs.NumRecords()
		}
	})
	felixFetch := timed(func() {
		for from := uint64(0); from < uint64(b.N); {
			page, err := felix.Read(ctx, stream, from, client.ReadOptions{})
			if err != nil {
				b.Fatal(err)
			}
			from = page.Next
		}
	})
	b.StopTimer()
	rate := func(d time.Duration) float64 { return float64(b.N) / d.Seconds() }
	b.ReportMetric(rate(kafkaProduce), "kafka_produce_rec/s")
	b.ReportMetric(rate(felixProduce), "felix1_produce_rec/s")
	b.ReportMetric(felixProduce.Seconds()/kafkaProduce.Seconds(), "produce_kafka/felix1")
	b.ReportMetric(rate(kafkaFetch), "kafka_fetch_rec/s")
	b.ReportMetric(rate(felixFetch), "felix1_fetch_rec/s")
	b.ReportMetric(felixFetch.Seconds()/kafkaFetch.Seconds(), "fetch_kafka/felix1")
}

func timed(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}

// countingConn counts the bytes a client reads off its connections.
type countingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

// BenchmarkKafkaFetchCompressedBytes fetches the same b.N 1 KiB records
// (sideRecord) from three streams that differ only in their Fetch codec
// (compression none, lz4, zstd: the topic's compression.type) and
// reports the bytes kgo read off the wire per record for each, and each
// codec's bytes against none's. The bytes, not the time, are the
// measurement; the run fails if a codec saved nothing.
func BenchmarkKafkaFetchCompressedBytes(b *testing.B) {
	cfg := kafkaConfig(b)
	br := startBroker(b, cfg)
	felix := dialFelix(b, br, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	records := sideRecords(b.N)
	codecs := []string{"none", "lz4", "zstd"}
	for _, codec := range codecs {
		s := client.Stream{Namespace: "kt", Name: "codec-" + codec}
		if _, err := felix.CreateStream(ctx, s, client.StreamConfig{Shards: 1, Durable: true, Compression: codec}); err != nil {
			b.Fatal(err)
		}
		for sent := 0; sent < len(records); sent += benchBatch {
			if err := felix.Produce(ctx, s, records[sent:min(sent+benchBatch, len(records))], client.PublishOptions{}, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := felix.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	wire := map[string]int64{}
	for _, codec := range codecs {
		var read atomic.Int64
		var d net.Dialer
		cl := kgoClient(b, br, cfg, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"kt.codec-" + codec: {0: kgo.NewOffset().AtStart()}}),
			kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
				c, err := d.DialContext(ctx, network, host)
				if err != nil {
					return nil, err
				}
				return countingConn{c, &read}, nil
			}))
		for got := 0; got < b.N; {
			fs := cl.PollFetches(ctx)
			if err := fs.Err(); err != nil {
				b.Fatalf("%s: fetch after %d of %d records: %v", codec, got, b.N, err)
			}
			got += fs.NumRecords()
		}
		cl.Close()
		wire[codec] = read.Load()
	}
	b.StopTimer()
	for _, codec := range codecs {
		b.ReportMetric(float64(wire[codec])/float64(b.N), codec+"_wire_B/rec")
	}
	for _, codec := range codecs[1:] {
		ratio := float64(wire[codec]) / float64(wire["none"])
		b.ReportMetric(ratio, codec+"/none")
		if b.N >= 1000 && ratio >= 1 {
			b.Errorf("%s fetched %d bytes for %d records, none %d: the codec saved nothing", codec, wire[codec], b.N, wire["none"])
		}
	}
}
