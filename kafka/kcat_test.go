package kafka_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
)

// TestKcat drives the listener with kcat (librdkafka 2.0, an old client
// with other versions than kgo and sarama): produce (plain and
// idempotent), consume a partition from the beginning, and consume by
// group. Skipped when kcat is not installed (`apt-get install -y kcat`).
func TestKcat(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat is not installed (apt-get install -y kcat); skipping the librdkafka client check")
	}
	cfg := kafkaConfig(t)
	b := startBroker(t, cfg)
	createStream(t, b, cfg, 2)
	common := []string{"-b", b.KafkaAddr().String(),
		"-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=PLAIN",
		"-X", "sasl.username=default", "-X", "sasl.password=" + brokertest.Token(t, cfg, "default")}
	run := func(stdin string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, kcat, append(append([]string{}, common...), args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("kcat %v: %v\n%s%s", args, err, out, stderr.String())
		}
		return string(out)
	}
	run("one\ntwo\nthree\n", "-P", "-t", topic, "-p", "0", "-z", "lz4")
	run("four\nfive\n", "-P", "-t", topic, "-p", "0", "-X", "enable.idempotence=true")
	run("other\n", "-P", "-t", topic, "-p", "1")

	if got := run("", "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-f", "%o:%s\n"); got != "0:one\n1:two\n2:three\n3:four\n4:five\n" {
		t.Fatalf("kcat -C partition 0 from the beginning read:\n%s", got)
	}
	got := run("", "-G", "kcat-group", "-c", "6", "-f", "%p:%o:%s\n", "-X", "auto.offset.reset=earliest", topic)
	for _, want := range []string{"0:0:one", "0:4:five", "1:0:other"} {
		if !strings.Contains(got, want+"\n") {
			t.Fatalf("kcat -G read:\n%s\nwant a line %q", got, want)
		}
	}
}

// TestKcatCodecs: librdkafka 2.0 compresses with each of gzip, snappy,
// lz4 and zstd (it decides from the advertised Produce range: from v3 it
// logged "Broker does not support compression type gzip: not compressing
// batch" and sent the records uncompressed), the records come back
// through kcat, and a stream created with that codec answers Fetch with
// batches compressed in it.
func TestKcatCodecs(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat is not installed (apt-get install -y kcat); skipping the librdkafka codec check")
	}
	cfg := kafkaConfig(t)
	b := startBroker(t, cfg)
	felix := dialFelix(t, b, cfg)
	cl := kgoClient(t, b, cfg)
	common := []string{"-b", b.KafkaAddr().String(),
		"-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=PLAIN",
		"-X", "sasl.username=default", "-X", "sasl.password=" + brokertest.Token(t, cfg, "default")}
	value := strings.Repeat("compressible ", 200)
	for _, codec := range []string{"gzip", "snappy", "lz4", "zstd"} {
		name := "kt." + codec
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if _, err := felix.CreateStream(ctx, client.Stream{Namespace: "kt", Name: codec}, client.StreamConfig{Durable: true, Compression: codec}); err != nil {
			cancel()
			t.Fatalf("create %s: %v", name, err)
		}
		var stderr strings.Builder
		produce := exec.CommandContext(ctx, kcat, append(append([]string{}, common...), "-P", "-t", name, "-p", "0", "-z", codec, "-d", "msg")...)
		produce.Stdin, produce.Stderr = strings.NewReader(value+"\n"+value+"\n"), &stderr
		// -d msg: librdkafka says, per MessageSet, the codec it sent it
		// with (its "not compressing batch" notice is a debug line too).
		if err := produce.Run(); err != nil || !strings.Contains(stderr.String(), "MsgVersion 2") ||
			strings.Contains(stderr.String(), "not compressing") || !strings.Contains(stderr.String(), ", "+codec+")") {
			cancel()
			t.Fatalf("kcat -P -z %s: %v\n%s", codec, err, stderr.String())
		}
		consume := exec.CommandContext(ctx, kcat, append(append([]string{}, common...), "-C", "-t", name, "-p", "0", "-o", "beginning", "-e", "-f", "%o:%s\n")...)
		out, err := consume.Output()
		cancel()
		if want := "0:" + value + "\n1:" + value + "\n"; err != nil || string(out) != want {
			t.Fatalf("kcat -C %s: %v\n%.200s", name, err, out)
		}
		req := fetchRequest(0, 1<<20, 1<<20, 1, 0)
		req.Topics[0].Topic = name
		raw := roundTrip(t, cl, req).(*kmsg.FetchResponse).Topics[0].Partitions[0].RecordBatches
		var batch kmsg.RecordBatch
		if err := batch.ReadFrom(raw); err != nil || batch.Attributes&7 != int16(codecNumbers[codec]) || len(raw) > len(value) {
			t.Fatalf("Fetch of %s: %d bytes, attributes %#x (%v); want batches compressed with %s, smaller than one value", name, len(raw), batch.Attributes, err, codec)
		}
	}
}

// codecNumbers are the RecordBatch codec numbers.
var codecNumbers = map[string]int{"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
