package kafka_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/getfelix/felix-go/internal/quicconf"
)

// TestTLSAnonymousAutoCreate: over TLS (the broker's certificate), a
// client that does not authenticate is served as the anonymous tenant;
// its produce to an unknown topic creates a durable stream of that tenant
// (kafka_auto_create_topics: create), which it reads back; the same topic
// name of another tenant is untouched.
func TestTLSAnonymousAutoCreate(t *testing.T) {
	cfg := kafkaConfig(t)
	cfg.KafkaTLS = true
	cfg.KafkaAnonymousTenant = "anon"
	cfg.KafkaAutoCreateTopics = "create"
	cfg.KafkaAutoCreateShards = 2
	b := startBroker(t, cfg)
	createStream(t, b, cfg, 1) // tenant default's kt.orders

	tlsConf, err := quicconf.ClientTLS(filepath.Join(cfg.DataDir, quicconf.CertFile), false)
	if err != nil {
		t.Fatal(err)
	}
	tlsConf.NextProtos = nil
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.KafkaAddr().String()), kgo.DialTLSConfig(tlsConf),
		kgo.AllowAutoTopicCreation(), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {1: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 1, Value: []byte("anonymous")})
	if err := res.FirstErr(); err != nil {
		t.Fatalf("anonymous produce over TLS: %v", err)
	}
	fs := cl.PollFetches(ctx)
	if fs.NumRecords() != 1 || string(fs.Records()[0].Value) != "anonymous" || fs.Records()[0].Offset != 0 {
		t.Fatalf("read back %d records (%v), want the one produced at offset 0", fs.NumRecords(), fs.Errors())
	}
	if got := committed(t, b, cfg); got != 0 {
		t.Fatalf("tenant default's %s holds %d records; the anonymous tenant's produce went there", topic, got)
	}
}
