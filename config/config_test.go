package config

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// writeFile writes a config file into a fresh temp dir and returns its path.
func writeFile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "felix.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func wantErrContains(t *testing.T, err error, wants ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one containing %q", wants)
	}
	for _, w := range wants {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
}

func TestDefaultValidates(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	if c, err := Load("", nil); err != nil || !reflect.DeepEqual(c, Default()) {
		t.Fatalf("Load(\"\", nil) = %+v, %v; want Default()", c, err)
	}
}

// The default lanes: four, or one per processor past four.
func TestDefaultWriterLanesFollowProcessors(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for procs, want := range map[int]int{1: 4, 2: 4, 4: 4, 16: 16} {
		runtime.GOMAXPROCS(procs)
		if got := Default().SubscriberWriterLanes; got != want {
			t.Errorf("at GOMAXPROCS %d the default subscriber_writer_lanes is %d, want %d", procs, got, want)
		}
	}
}

func TestLoadFileErrorsNameKeyAndFile(t *testing.T) {
	tests := []struct {
		name  string
		give  string
		wants []string
	}{
		{"unknown key", "subscriber_queue_capacity: 8\nsubscribr_queue_capacity: 9\n",
			[]string{`:2: unknown key "subscribr_queue_capacity"`, "did you mean subscriber_queue_capacity?"}},
		{"env-style key is not a file key", "FELIX_LISTEN: x\n", []string{`unknown key "FELIX_LISTEN"`}},
		{"bad integer", "pub_queue_depth: many\n", []string{":1: pub_queue_depth: bad integer"}},
		{"bad size", "replay_ring_max_bytes: 64 MB please\n", []string{"replay_ring_max_bytes: bad byte size"}},
		{"bad duration", "auth_timeout_ms: soon\n", []string{"auth_timeout_ms: want integer milliseconds"}},
		{"int overflows int", "max_frame_bytes: 9999999999999999999\n", []string{"max_frame_bytes"}},
		{"repeated key", "listen: a\nlisten: b\n", []string{":2: listen: repeats line 1"}},
		{"not a scalar", "listen: [a, b]\n", []string{"listen: want a single value"}},
		{"not a mapping", "- listen\n", []string{"want a mapping"}},
		{"two documents", "listen: a\n---\nlisten: b\n", []string{"want one YAML document"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, tt.give)
			c := Default()
			wantErrContains(t, LoadFile(path, &c), append(tt.wants, path)...)
		})
	}
}

func TestLoadFileReportsEveryProblem(t *testing.T) {
	c := Default()
	err := LoadFile(writeFile(t, "bogus_one: 1\npub_queue_depth: x\nbogus_two: 2\n"), &c)
	wantErrContains(t, err, "bogus_one", "pub_queue_depth", "bogus_two")
}

func TestLoadFileEmpty(t *testing.T) {
	for _, give := range []string{"", "# only a comment\n"} {
		c := Default()
		if err := LoadFile(writeFile(t, give), &c); err != nil || !reflect.DeepEqual(c, Default()) {
			t.Errorf("LoadFile(%q) = %v, changed=%v; want no error and no change", give, err, !reflect.DeepEqual(c, Default()))
		}
	}
}

func TestLoadEnvUnknownVariable(t *testing.T) {
	c := Default()
	err := LoadEnv([]string{"HOME=/root", "FELIX_SUBSCRIBR_QUEUE_CAPACITY=8"}, &c)
	wantErrContains(t, err,
		"config: unknown environment variable FELIX_SUBSCRIBR_QUEUE_CAPACITY",
		"did you mean FELIX_SUBSCRIBER_QUEUE_CAPACITY?",
		"known: FELIX_LISTEN, ")
}

// TestLoadEnvClientVariables: the broker skips the variables the client
// commands read, so one shell can run both.
func TestLoadEnvClientVariables(t *testing.T) {
	c := Default()
	if err := LoadEnv([]string{"FELIX_TOKEN=eyJ.x.y"}, &c); err != nil {
		t.Errorf("LoadEnv(FELIX_TOKEN) = %v, want nil: FELIX_TOKEN is the clients'", err)
	}
}

func TestLoadEnvValues(t *testing.T) {
	c := Default()
	err := LoadEnv([]string{
		"FELIX_SUBSCRIBER_QUEUE_CAPACITY=8",
		"FELIX_PUBLISH_QUEUE_WAIT_TIMEOUT_MS=50",
		"FELIX_SUBSCRIBER_SINGLE_WRITER_PER_CONN=true",
		"FELIX_TLS_CERT=", // an empty value is a value: it clears the field
		"NOT_FELIX_X=1",
	}, &c)
	if err != nil {
		t.Fatal(err)
	}
	if c.SubscriberQueueCapacity != 8 || c.PublishQueueWaitTimeout != 50*time.Millisecond || !c.SubscriberSingleWriterPerConn {
		t.Errorf("got %d, %s, %v; want 8, 50ms, true", c.SubscriberQueueCapacity, c.PublishQueueWaitTimeout, c.SubscriberSingleWriterPerConn)
	}
	wantErrContains(t, LoadEnv([]string{"FELIX_PUB_QUEUE_DEPTH=x"}, &c), "FELIX_PUB_QUEUE_DEPTH: bad integer")
}

// TestQuotaKnobNames: the FELIX_* names of the security limits
// (FELIX_MAX_CLIENT_CONNECTIONS and the others) load as they are, and the
// byte rate takes a size like the other *_bytes knobs.
func TestQuotaKnobNames(t *testing.T) {
	c := Default()
	err := LoadEnv([]string{
		"FELIX_MAX_CLIENT_CONNECTIONS=100",
		"FELIX_MAX_CONNECTIONS_PER_IP=10",
		"FELIX_TENANT_PUBLISH_BYTES_PER_SEC=1MiB",
		"FELIX_TENANT_PUBLISH_MSGS_PER_SEC=5000",
		"FELIX_TENANT_MAX_STREAMS=50",
		"FELIX_TENANT_MAX_SUBSCRIPTIONS=200",
		"FELIX_MAX_PREAUTH_CONNECTIONS=30",
		"FELIX_MAX_PREAUTH_CONNECTIONS_PER_IP=3",
		"FELIX_AUTH_FAILURE_BURST=4",
		"FELIX_AUTH_FAILURE_MAX_ADDRESSES=99",
	}, &c)
	if err != nil {
		t.Fatal(err)
	}
	got := []int64{int64(c.MaxClientConnections), int64(c.MaxConnectionsPerIP), c.TenantPublishBytesPerSec,
		c.TenantPublishMsgsPerSec, int64(c.TenantMaxStreams), int64(c.TenantMaxSubscriptions),
		int64(c.MaxPreAuthConnections), int64(c.MaxPreAuthConnectionsPerIP), int64(c.AuthFailureBurst), int64(c.AuthFailureMaxAddresses)}
	if want := []int64{100, 10, 1 << 20, 5000, 50, 200, 30, 3, 4, 99}; !reflect.DeepEqual(got, want) {
		t.Errorf("quota knobs from FELIX_* = %v, want %v", got, want)
	}
}

func TestPrecedence(t *testing.T) {
	path := writeFile(t, "pub_queue_depth: 10\npublish_window: 10\nfanout_batch_size: 10\n")
	env := []string{"FELIX_PUBLISH_WINDOW=20", "FELIX_FANOUT_BATCH_SIZE=20"}

	c, err := Load(path, env)
	if err != nil {
		t.Fatal(err)
	}
	if c.PubQueueDepth != 10 || c.PublishWindow != 20 || c.FanoutBatchSize != 20 {
		t.Errorf("file then env: got %d, %d, %d; want 10, 20, 20", c.PubQueueDepth, c.PublishWindow, c.FanoutBatchSize)
	}

	fs := pflag.NewFlagSet("felix", pflag.ContinueOnError)
	flags := RegisterFlags(fs)
	if err := fs.Parse([]string{"--fanout-batch-size=30"}); err != nil {
		t.Fatal(err)
	}
	flags.Apply(&c)
	// Unset flags keep their defaults in Flags; Apply must not copy those.
	if c.PubQueueDepth != 10 || c.PublishWindow != 20 || c.FanoutBatchSize != 30 {
		t.Errorf("then flags: got %d, %d, %d; want 10, 20, 30", c.PubQueueDepth, c.PublishWindow, c.FanoutBatchSize)
	}
}

// TestKafkaDefaultNamespaceSources: kafka_default_namespace is "default"
// unless the file, the environment or a flag says otherwise, in that
// order.
func TestKafkaDefaultNamespaceSources(t *testing.T) {
	if got := Default().KafkaDefaultNamespace; got != "default" {
		t.Errorf("Default().KafkaDefaultNamespace = %q, want \"default\"", got)
	}
	c, err := Load(writeFile(t, "kafka_default_namespace: apps\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.KafkaDefaultNamespace != "apps" {
		t.Errorf("from the file: got %q, want \"apps\"", c.KafkaDefaultNamespace)
	}
	c, err = Load(writeFile(t, "kafka_default_namespace: apps\n"), []string{"FELIX_KAFKA_DEFAULT_NAMESPACE=prod"})
	if err != nil {
		t.Fatal(err)
	}
	if c.KafkaDefaultNamespace != "prod" {
		t.Errorf("from the environment: got %q, want \"prod\"", c.KafkaDefaultNamespace)
	}
	fs := pflag.NewFlagSet("felix", pflag.ContinueOnError)
	flags := RegisterFlags(fs)
	if err := fs.Parse([]string{"--kafka-default-namespace=edge"}); err != nil {
		t.Fatal(err)
	}
	flags.Apply(&c)
	if c.KafkaDefaultNamespace != "edge" {
		t.Errorf("from the flag: got %q, want \"edge\"", c.KafkaDefaultNamespace)
	}
	_, err = Load(writeFile(t, "kafka_default_namespace: a.b\n"), nil)
	wantErrContains(t, err, "kafka_default_namespace")
}

func TestFlags(t *testing.T) {
	fs := pflag.NewFlagSet("felix", pflag.ContinueOnError)
	flags := RegisterFlags(fs)
	for _, name := range []string{"listen", "data-dir", "config", "addr-file", "log-level", "print-config"} {
		if fs.Lookup(name) != nil {
			t.Errorf("flag --%s is registered; the CLI owns it", name)
		}
	}
	err := fs.Parse([]string{
		"--subscriber-single-writer-per-conn", // a bool flag needs no value
		"--subscriber-queue-max-bytes-total=5GiB",
		"--event-batch-max-delay-us", "1ms",
		"--tls-cert", "c.pem",
	})
	if err != nil {
		t.Fatal(err)
	}
	var c Config
	flags.Apply(&c)
	want := Config{SubscriberSingleWriterPerConn: true, SubscriberQueueMaxBytesTotal: 5 << 30,
		EventBatchMaxDelay: time.Millisecond, TLSCert: "c.pem"}
	if c != want {
		t.Errorf("Apply set %+v, want %+v", c, want)
	}
	wantErrContains(t, fs.Parse([]string{"--pub-queue-depth=x"}), "pub-queue-depth", "bad integer")
}

// TestFlagUsageDescribesEveryKnob: each knob flag's usage says what the knob
// does, not only its unit, choices and variable.
func TestFlagUsageDescribesEveryKnob(t *testing.T) {
	fs := pflag.NewFlagSet("felix", pflag.ContinueOnError)
	RegisterFlags(fs)
	n := 0
	fs.VisitAll(func(f *pflag.Flag) {
		n++
		key := strings.ReplaceAll(f.Name, "-", "_")
		generic := []string{"env FELIX_" + strings.ToUpper(key), strings.Join(choices[key], ", "),
			"milliseconds, or a duration like 250us", "microseconds, or a duration like 250us", "bytes, or a size like 64MiB"}
		desc := f.Usage
		for _, g := range generic {
			if g != "" {
				desc = strings.ReplaceAll(desc, g, "")
			}
		}
		if desc = strings.Trim(desc, "; "); len(desc) < 10 {
			t.Errorf("--%s usage %q does not describe the knob (left %q after its unit, choices and variable)", f.Name, f.Usage, desc)
		}
	})
	if want := len(knobs) - len(cliOwned); n != want {
		t.Errorf("visited %d knob flags, want %d", n, want)
	}
	// The CLI registers these flags itself, with the same usage line.
	for key := range cliOwned {
		if h := knobByKey[key].help; h == "" || !strings.HasPrefix(FlagUsage(key), h+"; ") {
			t.Errorf("FlagUsage(%q) = %q, want it to start with the knob's help %q", key, FlagUsage(key), h)
		}
	}
}

// TestKnobWithoutHelpPanics: a field without a help tag stops the package
// from loading, so a new knob cannot ship without its description.
func TestKnobWithoutHelpPanics(t *testing.T) {
	type noHelp struct {
		Depth int `yaml:"depth"`
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "Depth has no help tag") {
			t.Errorf("readKnobs of a field without a help tag: recovered %v, want a panic naming the field", r)
		}
	}()
	readKnobs(reflect.TypeFor[noHelp]())
}

func TestValidateRefuses(t *testing.T) {
	tests := []struct {
		give    func(*Config)
		wantKey string
	}{
		{func(c *Config) { c.LogLevel = "verbose" }, "log_level"},
		{func(c *Config) { c.TLSCert = "c.pem" }, "tls_cert"},
		{func(c *Config) { c.MaxFrameBytes = 1023 }, "max_frame_bytes"},
		{func(c *Config) { c.PreAuthMaxFrameBytes = 0 }, "pre_auth_max_frame_bytes"},
		{func(c *Config) { c.PreAuthMaxFrameBytes = c.MaxFrameBytes + 1 }, "pre_auth_max_frame_bytes"},
		{func(c *Config) { c.AuthTimeout = 0 }, "auth_timeout_ms"},
		{func(c *Config) { c.KafkaMaxRequestDecompressedBytes = c.KafkaMaxBatchBytes - 1 }, "kafka_max_request_decompressed_bytes"},
		{func(c *Config) { c.KafkaFetchMaxBytes = 0 }, "kafka_fetch_max_bytes"},
		{func(c *Config) { c.KafkaFetchMaxBytes = 2 << 30 }, "kafka_fetch_max_bytes"},
		{func(c *Config) { c.KafkaMaxInflightFetchBytes = c.KafkaFetchMaxBytes - 1 }, "kafka_max_inflight_fetch_bytes"},
		{func(c *Config) { c.KafkaMaxInflightRequestBytes = c.KafkaMaxRequestBytes - 1 }, "kafka_max_inflight_request_bytes"},
		{func(c *Config) { c.KafkaRequestReadTimeout = 0 }, "kafka_request_read_timeout_ms"},
		{func(c *Config) { c.KafkaIdleTimeout = 0 }, "kafka_idle_timeout_ms"},
		{func(c *Config) { c.MaxClientConnections = -1 }, "max_client_connections"},
		{func(c *Config) { c.MaxConnectionsPerIP = -1 }, "max_connections_per_ip"},
		{func(c *Config) { c.TenantMaxConnections = -1 }, "tenant_max_connections"},
		{func(c *Config) { c.MaxPreAuthConnections = -1 }, "max_preauth_connections"},
		{func(c *Config) { c.MaxPreAuthConnectionsPerIP = -1 }, "max_preauth_connections_per_ip"},
		{func(c *Config) { c.AuthFailureBurst = -1 }, "auth_failure_burst"},
		{func(c *Config) { c.AuthFailureInterval = 0 }, "auth_failure_interval_ms"},
		{func(c *Config) { c.AuthFailureMaxAddresses = 0 }, "auth_failure_max_addresses"},
		{func(c *Config) { c.TenantPublishBytesPerSec = -1 }, "tenant_publish_bytes_per_sec"},
		{func(c *Config) { c.TenantPublishMsgsPerSec = -1 }, "tenant_publish_msgs_per_sec"},
		{func(c *Config) { c.TenantMaxStreams = -1 }, "tenant_max_streams"},
		{func(c *Config) { c.TenantMaxSubscriptions = -1 }, "tenant_max_subscriptions"},
		{func(c *Config) { c.PubQueueDepth = 0 }, "pub_queue_depth"},
		{func(c *Config) { c.PublishQueueWaitTimeout = -time.Millisecond }, "publish_queue_wait_timeout_ms"},
		{func(c *Config) { c.PublishWindow = -1 }, "publish_window"},
		{func(c *Config) { c.SubscriberQueueCapacity = 0 }, "subscriber_queue_capacity"},
		{func(c *Config) { c.SubscriberQueueCapacityMax = 0 }, "subscriber_queue_capacity_max"},
		{func(c *Config) { c.SubscriberQueueCapacity = c.SubscriberQueueCapacityMax + 1 }, "subscriber_queue_capacity"},
		{func(c *Config) { c.SubscriberQueueMaxBytes = -1 }, "subscriber_queue_max_bytes"},
		{func(c *Config) { c.SubscriberQueueMaxBytesTotal = -1 }, "subscriber_queue_max_bytes_total"},
		{func(c *Config) { c.SubscriberQueueMaxBytesTotal = c.SubscriberQueueMaxBytes - 1 }, "subscriber_queue_max_bytes_total"},
		{func(c *Config) { c.SubscriberQueuePolicy = "drop_all" }, "subscriber_queue_policy"},
		{func(c *Config) { c.SubscriberEgressMaxBytes = -1 }, "subscriber_egress_max_bytes"},
		{func(c *Config) { c.SubscriberWriterLanes = 0 }, "subscriber_writer_lanes"},
		{func(c *Config) { c.SubscriberLaneQueueDepth = 0 }, "subscriber_lane_queue_depth"},
		{func(c *Config) { c.SubscriberLaneQueuePolicy = "drop_old" }, "subscriber_lane_queue_policy"},
		{func(c *Config) { c.SubscriberLaneShard = "random" }, "subscriber_lane_shard"},
		{func(c *Config) { c.EventBatchMaxEvents = 0 }, "event_batch_max_events"},
		{func(c *Config) { c.EventBatchMaxBytes = -1 }, "event_batch_max_bytes"},
		{func(c *Config) { c.EventBatchMaxDelay = -time.Microsecond }, "event_batch_max_delay_us"},
		{func(c *Config) { c.FanoutBatchSize = -1 }, "fanout_batch_size"},
		{func(c *Config) { c.ReplayRingRecords = 0 }, "replay_ring_records"},
		{func(c *Config) { c.ReplayRingMaxBytes = -1 }, "replay_ring_max_bytes"},
		{func(c *Config) { c.KafkaDefaultNamespace = "" }, "kafka_default_namespace"},
		{func(c *Config) { c.KafkaDefaultNamespace = "a.b" }, "kafka_default_namespace"},
		{func(c *Config) { c.KafkaDefaultNamespace = "__kafka" }, "kafka_default_namespace"},
		{func(c *Config) { c.KafkaDefaultNamespace = "a/b" }, "kafka_default_namespace"},
	}
	for _, tt := range tests {
		t.Run(tt.wantKey, func(t *testing.T) {
			if _, ok := knobByKey[tt.wantKey]; !ok {
				t.Fatalf("test names %q, which is not a knob", tt.wantKey)
			}
			c := Default()
			tt.give(&c)
			wantErrContains(t, c.Validate(), "config: "+tt.wantKey+": ")
		})
	}
}

// TestLaneDropNewRefused: a lane policy drop_new lost batches
// of subscribers that kept up (a lane is shared); it is refused, saying why.
func TestLaneDropNewRefused(t *testing.T) {
	c := Default()
	c.SubscriberLaneQueuePolicy = "drop_new"
	wantErrContains(t, c.Validate(), "config: subscriber_lane_queue_policy: ", "subscribers that kept up")
}

func TestValidateReportsEveryProblem(t *testing.T) {
	c := Default()
	c.LogLevel, c.PubQueueDepth, c.SubscriberLaneShard = "loud", 0, "x"
	wantErrContains(t, c.Validate(), "log_level", "pub_queue_depth", "subscriber_lane_shard")
}

func TestValidateAccepts(t *testing.T) {
	tests := []struct {
		name string
		give func(*Config)
	}{
		{"total above 4 GiB", func(c *Config) { c.SubscriberQueueMaxBytesTotal = 5 << 30 }},
		{"total with no per-subscriber bound", func(c *Config) { c.SubscriberQueueMaxBytes, c.SubscriberQueueMaxBytesTotal = 0, 1 }},
		{"total equal to one share", func(c *Config) { c.SubscriberQueueMaxBytesTotal = c.SubscriberQueueMaxBytes }},
		{"pipelining off", func(c *Config) { c.PublishWindow = 0 }},
		{"single-event mode", func(c *Config) { c.FanoutBatchSize = 0 }},
		{"no batch delay", func(c *Config) { c.EventBatchMaxDelay = 0 }},
		{"own certificate", func(c *Config) { c.TLSCert, c.TLSKey = "c.pem", "k.pem" }},
		{"block policies", func(c *Config) { c.SubscriberQueuePolicy, c.SubscriberLaneQueuePolicy = "block", "block" }},
		{"frame caps at 1 KiB", func(c *Config) { c.MaxFrameBytes, c.PreAuthMaxFrameBytes = 1024, 1024 }},
		{"connection limits off", func(c *Config) { c.MaxClientConnections, c.MaxConnectionsPerIP = 0, 0 }},
		{"tenant quotas on", func(c *Config) {
			c.TenantPublishBytesPerSec, c.TenantPublishMsgsPerSec, c.TenantMaxStreams, c.TenantMaxSubscriptions = 1, 1, 1, 1
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.give(&c)
			if err := c.Validate(); err != nil {
				t.Errorf("Validate() = %v, want nil", err)
			}
		})
	}
}

func TestFiveGiBTotalLoads(t *testing.T) {
	const want = 5 << 30
	c, err := Load(writeFile(t, "subscriber_queue_max_bytes_total: 5GiB\n"), nil)
	if err != nil || c.SubscriberQueueMaxBytesTotal != want {
		t.Errorf("file: got %d, %v; want %d", c.SubscriberQueueMaxBytesTotal, err, want)
	}
	c, err = Load("", []string{"FELIX_SUBSCRIBER_QUEUE_MAX_BYTES_TOTAL=5368709120"})
	if err != nil || c.SubscriberQueueMaxBytesTotal != want {
		t.Errorf("env: got %d, %v; want %d", c.SubscriberQueueMaxBytesTotal, err, want)
	}
}

func TestParseBytes(t *testing.T) {
	tests := []struct {
		give    string
		want    int64
		wantErr bool
	}{
		{give: "0", want: 0},
		{give: "65536", want: 65536},
		{give: "512B", want: 512},
		{give: "16KiB", want: 16 << 10},
		{give: "64MiB", want: 64 << 20},
		{give: "1GiB", want: 1 << 30},
		{give: "5GiB", want: 5 << 30},
		{give: "2TiB", want: 2 << 40},
		{give: "5GB", want: 5_000_000_000},
		{give: "10kb", want: 10_000},
		{give: " 64 MiB ", want: 64 << 20},
		{give: "", wantErr: true},
		{give: "MiB", wantErr: true},
		{give: "-1", wantErr: true},
		{give: "1.5GiB", wantErr: true},
		{give: "64M", wantErr: true},
		{give: "64 mebibytes", wantErr: true},
		{give: "9223372036854775807", want: 1<<63 - 1},
		{give: "8388608TiB", wantErr: true}, // 2^63: one past int64
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			got, err := ParseBytes(tt.give)
			if tt.wantErr {
				if err == nil || !strings.HasPrefix(err.Error(), "config: ") {
					t.Errorf("ParseBytes(%q) = %d, %v; want a config: error", tt.give, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("ParseBytes(%q) = %d, %v; want %d", tt.give, got, err, tt.want)
			}
		})
	}
}

func TestDurationUnits(t *testing.T) {
	tests := []struct {
		key     string
		give    string
		want    time.Duration
		wantErr bool
	}{
		{key: "auth_timeout_ms", give: "1500", want: 1500 * time.Millisecond},
		{key: "auth_timeout_ms", give: "10s", want: 10 * time.Second},
		{key: "publish_queue_wait_timeout_ms", give: "0", want: 0},
		{key: "event_batch_max_delay_us", give: "250", want: 250 * time.Microsecond},
		{key: "event_batch_max_delay_us", give: `"250us"`, want: 250 * time.Microsecond},
		{key: "event_batch_max_delay_us", give: "250µs", want: 250 * time.Microsecond},
		{key: "event_batch_max_delay_us", give: "2ms", want: 2 * time.Millisecond},
		{key: "auth_timeout_ms", give: "1.5", wantErr: true},
		{key: "auth_timeout_ms", give: "9223372036854775807", wantErr: true}, // overflows as ms
	}
	for _, tt := range tests {
		t.Run(tt.key+"="+tt.give, func(t *testing.T) {
			var c Config
			err := LoadFile(writeFile(t, tt.key+": "+tt.give+"\n"), &c)
			if tt.wantErr {
				wantErrContains(t, err, tt.key)
				return
			}
			got := reflect.ValueOf(c).Field(knobByKey[tt.key].index).Interface()
			if err != nil || got != tt.want {
				t.Errorf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestYAMLRoundTrip(t *testing.T) {
	odd := Default()
	odd.AddrFile = "addr: with colon.txt"
	odd.LogLevel = "debug"
	odd.TLSCert, odd.TLSKey = "true", "123"   // strings that look like other YAML types
	odd.AuthTimeout = 1500 * time.Microsecond // not a whole number of ms
	odd.EventBatchMaxDelay = 0
	odd.SubscriberQueueMaxBytesTotal = 5 << 30
	odd.SubscriberSingleWriterPerConn = true

	tests := []struct {
		name string
		give Config
	}{
		{"defaults", Default()},
		{"odd values", odd},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := tt.give.YAML()
			if err != nil {
				t.Fatal(err)
			}
			var got Config // start from zero so every key must be in the output
			if err := LoadFile(writeFile(t, string(out)), &got); err != nil {
				t.Fatalf("loading YAML() output: %v\n%s", err, out)
			}
			if got != tt.give {
				t.Errorf("round trip changed the config:\n got %+v\nwant %+v\nYAML:\n%s", got, tt.give, out)
			}
		})
	}
}

func TestYAMLUnits(t *testing.T) {
	out, err := Default().YAML()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"auth_timeout_ms: 10000\n",
		"publish_queue_wait_timeout_ms: 2000\n",
		"event_batch_max_delay_us: 250\n",
		"max_frame_bytes: 16777216\n",
		"tls_cert: \"\"\n",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("YAML() lacks %q:\n%s", want, out)
		}
	}
}

// TestRingTotalDefaultsToAShareOfMemory: every shard's ring together is
// bounded by default (it was off, and one client pinned 2.7 GB with idle
// rings): an eighth of the machine's memory, at least one ring's worth.
func TestRingTotalDefaultsToAShareOfMemory(t *testing.T) {
	c := Default()
	if c.ReplayRingMaxBytesTotal < c.ReplayRingMaxBytes {
		t.Fatalf("replay_ring_max_bytes_total defaults to %d, want at least one ring (%d)", c.ReplayRingMaxBytesTotal, c.ReplayRingMaxBytes)
	}
	if mem := physicalMemory(); mem > 0 && c.ReplayRingMaxBytesTotal != max(mem/8, 64<<20) {
		t.Fatalf("replay_ring_max_bytes_total defaults to %d with %d bytes of memory, want an eighth", c.ReplayRingMaxBytesTotal, mem)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestOverflowingKnobsRefused: a bare integer times its unit that does not
// fit in a time.Duration, or a byte size past int64, is refused naming the
// knob and the range, never wrapped (18446744073710 ms of
// retention wrapped to 0.45 ms and deleted the stream's records). The same
// holds for every source: file, environment and flags share knob.set.
func TestOverflowingKnobsRefused(t *testing.T) {
	tests := []struct {
		key, give string
		wants     []string
	}{
		{"durable_retention_age_ms", "18446744073710", []string{"at most 9223372036854 milliseconds", "0 keeps everything"}},
		{"durable_retention_age_ms", "9223372036854775807", []string{"at most 9223372036854 milliseconds"}},
		{"durable_sync_interval_ms", "9223372036855", []string{"at most 9223372036854 milliseconds"}},
		{"event_batch_max_delay_us", "9223372036854776", []string{"at most 9223372036854775 microseconds"}},
		{"durable_retention_bytes", "10000000TB", []string{"at most 9223372036854775807 bytes", "0 keeps everything"}},
		{"max_frame_bytes", "8GiB", []string{"at most 4294967295"}},
	}
	for _, tt := range tests {
		t.Run(tt.key+"="+tt.give, func(t *testing.T) {
			c := Default()
			err := LoadFile(writeFile(t, tt.key+": "+tt.give+"\n"), &c)
			if err == nil {
				err = c.Validate()
			}
			wantErrContains(t, err, append([]string{tt.key}, tt.wants...)...)
		})
	}
}

// TestAdminAllowedHosts: the admin endpoint's extra host names come from
// the file, a variable or the flag, as a trimmed list; a name with a
// scheme, port or path is refused saying what is wanted.
func TestAdminAllowedHosts(t *testing.T) {
	c, err := Load(writeFile(t, "admin_allowed_hosts: \"a.internal, b.internal,\"\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.AdminHosts(); !slices.Equal(got, []string{"a.internal", "b.internal"}) {
		t.Errorf("from YAML: AdminHosts() = %q, want [a.internal b.internal]", got)
	}
	if c, err = Load("", []string{"FELIX_ADMIN_ALLOWED_HOSTS=env.internal"}); err != nil || c.AdminAllowedHosts != "env.internal" {
		t.Errorf("from the environment: %q, %v; want env.internal", c.AdminAllowedHosts, err)
	}
	fs := pflag.NewFlagSet("felix", pflag.ContinueOnError)
	flags := RegisterFlags(fs)
	if err := fs.Parse([]string{"--admin-allowed-hosts", "flag.internal"}); err != nil {
		t.Fatal(err)
	}
	flags.Apply(&c)
	if c.AdminAllowedHosts != "flag.internal" {
		t.Errorf("from the flag: %q, want flag.internal", c.AdminAllowedHosts)
	}
	if d := Default(); d.AdminAllowedHosts != "" {
		t.Errorf("default admin_allowed_hosts = %q, want empty", d.AdminAllowedHosts)
	}
	for _, bad := range []string{"http://a.internal", "a.internal:5080", "a.internal/x", "a b"} {
		c := Default()
		c.AdminAllowedHosts = bad
		wantErrContains(t, c.Validate(), "config: admin_allowed_hosts: ", "without scheme or port")
	}
}

// TestBrowserKnobs: browser_allowed_origins comes from the file, a
// variable or the flag as a trimmed list, defaults to none, and refuses
// what is not an origin; browser_listen must be host:port.
func TestBrowserKnobs(t *testing.T) {
	c, err := Load(writeFile(t, "browser_listen: 127.0.0.1:7380\nbrowser_allowed_origins: \"https://a.example, http://localhost:8080,\"\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.BrowserOrigins(); c.BrowserListen != "127.0.0.1:7380" || !slices.Equal(got, []string{"https://a.example", "http://localhost:8080"}) {
		t.Errorf("from YAML: listen %q, origins %q; want 127.0.0.1:7380, [https://a.example http://localhost:8080]", c.BrowserListen, got)
	}
	if c, err = Load("", []string{"FELIX_BROWSER_ALLOWED_ORIGINS=https://env.example"}); err != nil || c.BrowserAllowedOrigins != "https://env.example" {
		t.Errorf("from the environment: %q, %v; want https://env.example", c.BrowserAllowedOrigins, err)
	}
	fs := pflag.NewFlagSet("felix", pflag.ContinueOnError)
	flags := RegisterFlags(fs)
	if err := fs.Parse([]string{"--browser-allowed-origins", "https://flag.example", "--browser-listen", ":7380", "--browser-webtransport-listen", ":7381"}); err != nil {
		t.Fatal(err)
	}
	flags.Apply(&c)
	if c.BrowserAllowedOrigins != "https://flag.example" || c.BrowserListen != ":7380" || c.BrowserWebTransportListen != ":7381" {
		t.Errorf("from the flags: %q %q %q, want https://flag.example :7380 :7381", c.BrowserAllowedOrigins, c.BrowserListen, c.BrowserWebTransportListen)
	}
	if d := Default(); d.BrowserAllowedOrigins != "" || d.BrowserListen != "" {
		t.Errorf("defaults: origins %q, listen %q; want both empty (off, no origin)", d.BrowserAllowedOrigins, d.BrowserListen)
	}
	for _, bad := range []string{"a.example", "https://a.example/app", "ftp://a.example", "https://", "https://a.example?x=1"} {
		c := Default()
		c.BrowserAllowedOrigins = bad
		wantErrContains(t, c.Validate(), "config: browser_allowed_origins: ", "want comma-separated origins")
	}
	c = Default()
	c.BrowserListen = "7380"
	wantErrContains(t, c.Validate(), "config: browser_listen: ", "host:port")

	c = Default()
	if c.BrowserWebTransportListen != "" {
		t.Errorf("default browser_webtransport_listen %q, want empty (off)", c.BrowserWebTransportListen)
	}
	if c, err = Load("", []string{"FELIX_BROWSER_WEBTRANSPORT_LISTEN=127.0.0.1:7381", "FELIX_BROWSER_LISTEN=127.0.0.1:7380"}); err != nil || c.BrowserWebTransportListen != "127.0.0.1:7381" {
		t.Errorf("browser_webtransport_listen from the environment: %q, %v; want 127.0.0.1:7381", c.BrowserWebTransportListen, err)
	}
	c.BrowserListen = ""
	wantErrContains(t, c.Validate(), "config: browser_webtransport_listen: ", "needs browser_listen")
	c.BrowserListen, c.BrowserWebTransportListen = "127.0.0.1:7380", "7381"
	wantErrContains(t, c.Validate(), "config: browser_webtransport_listen: ", "host:port")
}
