package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/oauth"

	"github.com/getfelix/felix-go/brokertest"
)

// TestOAuthBearer: kgo logs in with SASL/OAUTHBEARER carrying a Felix
// token, the tenant named as the authorization id or as the tenant
// extension, and produces and consumes; a wrong token is refused, and
// the client reports it instead of producing.
func TestOAuthBearer(t *testing.T) {
	cfg := kafkaConfig(t)
	b := startBroker(t, cfg)
	createStream(t, b, cfg, 1)
	token := brokertest.Token(t, cfg, "default")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, auth := range []oauth.Auth{{Zid: "default", Token: token}, {Token: token, Extensions: map[string]string{"tenant": "default"}}} {
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.KafkaAddr().String()), kgo.SASL(auth.AsMechanism()),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(int64(i))}}))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte("via oauth")}).FirstErr(); err != nil {
			t.Fatalf("login %d (%+v): produce: %v", i, auth.Extensions, err)
		}
		if fs := cl.PollFetches(ctx); fs.Err() != nil || len(fs.Records()) != 1 || string(fs.Records()[0].Value) != "via oauth" {
			t.Fatalf("login %d: fetch: %v, %d records", i, fs.Err(), len(fs.Records()))
		}
	}
	bad, err := kgo.NewClient(kgo.SeedBrokers(b.KafkaAddr().String()), kgo.SASL(oauth.Auth{Zid: "default", Token: "not-a-token"}.AsMechanism()),
		kgo.RetryTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	// kgo retries a refused login until the record's context ends.
	badCtx, badCancel := context.WithTimeout(ctx, 3*time.Second)
	defer badCancel()
	if err := bad.ProduceSync(badCtx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte("x")}).FirstErr(); err == nil {
		t.Fatal("a wrong bearer token produced; want the login refused")
	}
}
