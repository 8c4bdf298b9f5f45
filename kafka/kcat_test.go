package kafka_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/getfelix/felix-go/internal/brokertest"
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
