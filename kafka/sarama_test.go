package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/rcrowley/go-metrics"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/config"
)

func init() {
	// go-metrics meters start a ticker goroutine that never stops (goleak).
	metrics.UseNilMetrics = true
}

// saramaConfig is sarama's default (Kafka 2.8 versions) with SASL/PLAIN as
// tenant default.
func saramaConfig(t *testing.T, cfg config.Config) *sarama.Config {
	sc := sarama.NewConfig()
	sc.Net.SASL.Enable = true
	sc.Net.SASL.Mechanism = sarama.SASLTypePlaintext
	sc.Net.SASL.User = "default"
	sc.Net.SASL.Password = brokertest.Token(t, cfg, "default")
	sc.Producer.Return.Successes = true
	sc.Producer.Partitioner = sarama.NewManualPartitioner
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	sc.Consumer.Return.Errors = true
	return sc
}

// saramaProduce sends n keyed messages over partitions with a sync
// producer and returns what was acknowledged.
func saramaProduce(t *testing.T, b *broker.Broker, sc *sarama.Config, first, n, partitions int) map[int32][]acked {
	t.Helper()
	p, err := sarama.NewSyncProducer([]string{b.KafkaAddr().String()}, sc)
	if err != nil {
		t.Fatalf("sarama producer: %v", err)
	}
	defer p.Close()
	out := make(map[int32][]acked)
	for i := first; i < first+n; i++ {
		msg := &sarama.ProducerMessage{
			Topic: topic, Partition: int32(i % partitions),
			Key: sarama.StringEncoder(fmt.Sprintf("key-%d", i)), Value: sarama.StringEncoder(fmt.Sprintf("value-%05d", i)),
			Headers: []sarama.RecordHeader{{Key: []byte("h"), Value: fmt.Appendf(nil, "hv-%d", i)}},
		}
		part, off, err := p.SendMessage(msg)
		if err != nil {
			t.Fatalf("sarama send %d: %v", i, err)
		}
		out[part] = append(out[part], acked{part, off, fmt.Sprintf("value-%05d", i), fmt.Sprintf("key-%d", i), fmt.Sprintf("hv-%d", i)})
	}
	return out
}

// TestSarama: sarama's sync producer (acks=1, then idempotent with zstd)
// and its ConsumerGroup: every acknowledged message is consumed once, in
// order per partition, with its key and headers.
func TestSarama(t *testing.T) {
	cfg := kafkaConfig(t)
	b := startBroker(t, cfg)
	createStream(t, b, cfg, 3)
	want := saramaProduce(t, b, saramaConfig(t, cfg), 0, 60, 3)

	idem := saramaConfig(t, cfg)
	idem.Producer.Idempotent = true
	idem.Producer.RequiredAcks = sarama.WaitForAll
	idem.Producer.Compression = sarama.CompressionZSTD
	idem.Net.MaxOpenRequests = 1
	for p, recs := range saramaProduce(t, b, idem, 60, 60, 3) {
		want[p] = append(want[p], recs...)
	}

	group, err := sarama.NewConsumerGroup([]string{b.KafkaAddr().String()}, "sarama-group", saramaConfig(t, cfg))
	if err != nil {
		t.Fatalf("sarama consumer group: %v", err)
	}
	defer group.Close()
	h := &collector{want: 120, done: make(chan struct{}), got: map[int32][]acked{}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	consumed := make(chan error, 1)
	go func() {
		for ctx.Err() == nil {
			if err := group.Consume(ctx, []string{topic}, h); err != nil {
				consumed <- err
				return
			}
		}
		consumed <- nil
	}()
	select {
	case <-h.done:
	case <-ctx.Done():
		t.Fatalf("sarama group consumed %d of 120 messages: %v", h.total(), ctx.Err())
	}
	cancel()
	if err := <-consumed; err != nil {
		t.Fatalf("sarama Consume: %v", err)
	}
	checkOnceInOrder(t, want, h.got)
}

// collector is a sarama.ConsumerGroupHandler keeping every message.
type collector struct {
	want int
	done chan struct{}
	once sync.Once
	mu   sync.Mutex
	got  map[int32][]acked
	n    int
}

func (*collector) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (*collector) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (c *collector) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for m := range claim.Messages() {
		a := acked{partition: m.Partition, offset: m.Offset, value: string(m.Value), key: string(m.Key)}
		for _, h := range m.Headers {
			if string(h.Key) == "h" {
				a.header = string(h.Value)
			}
		}
		c.mu.Lock()
		c.got[m.Partition] = append(c.got[m.Partition], a)
		c.n++
		if c.n >= c.want {
			c.once.Do(func() { close(c.done) })
		}
		c.mu.Unlock()
		s.MarkMessage(m, "")
	}
	return nil
}

func (c *collector) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// TestSaramaAdmin: sarama's ClusterAdmin creates, lists, describes and
// deletes a topic, and lists, describes and deletes a consumer group (one
// a kgo member committed in and left).
func TestSaramaAdmin(t *testing.T) {
	cfg := kafkaConfig(t)
	b := startBroker(t, cfg)
	adm, err := sarama.NewClusterAdmin([]string{b.KafkaAddr().String()}, saramaConfig(t, cfg))
	if err != nil {
		t.Fatalf("sarama cluster admin: %v", err)
	}
	defer adm.Close()

	retention := "1048576"
	detail := &sarama.TopicDetail{NumPartitions: 2, ReplicationFactor: 1, ConfigEntries: map[string]*string{"retention.bytes": &retention}}
	if err := adm.CreateTopic("ledger", detail, false); err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	if err := adm.CreateTopic("ledger", detail, false); !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		t.Fatalf("CreateTopic again: %v, want ErrTopicAlreadyExists", err)
	}
	topics, err := adm.ListTopics()
	if err != nil {
		t.Fatalf("ListTopics: %v", err)
	}
	if d, ok := topics["ledger"]; !ok || d.NumPartitions != 2 || d.ReplicationFactor != 1 {
		t.Fatalf("ListTopics: ledger is %+v (listed %v), want 2 partitions, replication factor 1", d, ok)
	}
	entries, err := adm.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: "ledger"})
	if err != nil {
		t.Fatalf("DescribeConfig: %v", err)
	}
	got := map[string]string{}
	for _, e := range entries {
		got[e.Name] = e.Value
	}
	if got["retention.bytes"] != retention || got["cleanup.policy"] != "delete" {
		t.Fatalf("DescribeConfig of ledger: %v, want retention.bytes %s and cleanup.policy delete", got, retention)
	}

	createStream(t, b, cfg, 1)
	produce(t, kgoClient(t, b, cfg), 0, 5, 1)
	member := groupConsumer(t, b, cfg, "auditors")
	pollUntil(t, member, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := member.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	member.Close()
	groups, err := adm.ListConsumerGroups()
	if err != nil || groups["auditors"] != "consumer" {
		t.Fatalf("ListConsumerGroups: %v, %v; want auditors, protocol type consumer", groups, err)
	}
	described, err := adm.DescribeConsumerGroups([]string{"auditors"})
	if err != nil || len(described) != 1 || described[0].State != "Empty" || described[0].Err != sarama.ErrNoError {
		t.Fatalf("DescribeConsumerGroups: %+v, %v; want auditors Empty", described, err)
	}
	if err := adm.DeleteConsumerGroup("auditors"); err != nil {
		t.Fatalf("DeleteConsumerGroup: %v", err)
	}
	if groups, err := adm.ListConsumerGroups(); err != nil || len(groups) != 0 {
		t.Fatalf("ListConsumerGroups after the delete: %v, %v; want none", groups, err)
	}

	if err := adm.DeleteTopic("ledger"); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
	if topics, err := adm.ListTopics(); err != nil || topics["ledger"].NumPartitions != 0 {
		t.Fatalf("ListTopics after the delete: %v, %v; want no ledger", topics, err)
	}
}
