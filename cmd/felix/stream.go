package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/config"
)

type streamOpts struct {
	conn           connOpts
	shards         uint32
	routing        string
	durable        bool
	retentionBytes string
	retentionAge   time.Duration
	replicas       int
	logAppendTime  bool
	compression    string
	json           bool
}

func newStreamCmd() *command {
	o := &streamOpts{}
	fs := newFlagSet("stream")
	o.conn.register(fs)
	o.conn.registerTimeout(fs, time.Minute)
	fs.Uint32Var(&o.shards, "shards", 1, "create: the shard count; a key picks the shard, no key goes to shard 0")
	fs.StringVar(&o.routing, "routing", "modulo", "create: how keys map to shards: modulo or jump (jump consistent hashing)")
	fs.BoolVar(&o.durable, "durable", false, "create: keep the stream in the broker's durable log (offsets, survives restarts)")
	fs.StringVar(&o.retentionBytes, "retention-bytes", "0", "create, durable only: keep about this much per shard, e.g. 10GiB (0: the broker's durable_retention_bytes)")
	fs.IntVar(&o.replicas, "replicas", 0, "create, durable only, in a cluster: keep each shard on this many members, a raft group (0: 3 in a cluster of at least 3, else 1)")
	fs.DurationVar(&o.retentionAge, "retention-age", 0, "create, durable only: keep records about this long, e.g. 72h (0: the broker's durable_retention_age_ms)")
	fs.BoolVar(&o.logAppendTime, "log-append-time", false, "create, durable only: every record's time is its append time, never a Kafka producer's (Kafka's message.timestamp.type=LogAppendTime)")
	fs.StringVar(&o.compression, "compression", "", "create, durable only: compress Kafka consumers' fetched batches with gzip, snappy, lz4 or zstd where that saves bytes, or none (Kafka's compression.type; default: each batch in the codec its producer sent)")
	fs.BoolVar(&o.json, "json", false, "print JSON")
	c := &command{
		name:  "stream",
		args:  "create|ls|info|rm",
		short: "create, list, describe and delete streams",
		long: `Administers streams. A stream that is only published or subscribed to is
made implicitly, in memory, with one shard; create one first to give it
shards, jump routing, or durability. Retention deletes whole segments. Definitions survive a broker restart.

  felix stream create --stream S [--shards N] [--routing modulo|jump] [--durable [--replicas N] [--retention-bytes B] [--retention-age D] [--log-append-time] [--compression none|gzip|snappy|lz4|zstd]]
  felix stream ls [--namespace NS]
  felix stream info --stream S
  felix stream rm --stream S`,
		flags: fs,
	}
	c.run = o.conn.bound(o.run)
	return c
}

func (o *streamOpts) run(ctx context.Context, args []string) error {
	if len(args) != 1 {
		return usagef("stream needs one of create, ls, info, rm; got %q", args)
	}
	verb := args[0]
	switch verb {
	case "create", "info", "rm":
		if err := o.conn.check(); err != nil {
			return err
		}
	case "ls":
		if o.conn.stream != "" {
			return usagef("ls lists a namespace's streams; drop --stream")
		}
	default:
		return usagef("unknown stream command %q (want create, ls, info or rm)", verb)
	}
	retention, err := config.ParseBytes(o.retentionBytes)
	if err != nil {
		return usagef("--retention-bytes: %v", err)
	}
	c, err := o.conn.dial(ctx)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		_ = c.Close(cctx)
	}()
	switch verb {
	case "create":
		info, err := c.CreateStream(ctx, o.conn.streamRef(), client.StreamConfig{
			Shards: o.shards, Routing: o.routing, Durable: o.durable, RetentionBytes: retention, RetentionAge: o.retentionAge,
			Replicas: o.replicas, LogAppendTime: o.logAppendTime,
			Compression: o.compression,
		})
		if err != nil {
			return err
		}
		if o.json {
			return printJSON(os.Stdout, streamJSON(info))
		}
		return o.print([]client.StreamInfo{info})
	case "info":
		info, err := c.StreamInfo(ctx, o.conn.streamRef())
		if err != nil {
			return err
		}
		return o.info(ctx, c, info)
	case "rm":
		if err := c.DeleteStream(ctx, o.conn.streamRef()); err != nil {
			return err
		}
		if o.json {
			return printJSON(os.Stdout, map[string]string{"deleted": o.conn.scope()})
		}
		fmt.Printf("deleted %s\n", o.conn.scope())
		return nil
	default: // ls
		ns := o.conn.namespace
		list, err := c.ListStreams(ctx, ns)
		if err != nil {
			return err
		}
		return o.print(list)
	}
}

// streamDoc is a stream as --json prints it.
type streamDoc struct {
	Stream         string `json:"stream"`
	Shards         uint32 `json:"shards"`
	Routing        string `json:"routing"`
	Durable        bool   `json:"durable"`
	Replicas       int    `json:"replicas"`
	RetentionBytes int64  `json:"retention_bytes"`
	RetentionAge   string `json:"retention_age"`
	LogAppendTime  bool   `json:"log_append_time"`
	Compression    string `json:"compression,omitempty"`
	Implicit       bool   `json:"implicit"`
	CreatedAt      string `json:"created_at"`
}

func streamJSON(s client.StreamInfo) streamDoc {
	return streamDoc{
		Stream: s.Stream.Tenant + "/" + s.Stream.Namespace + "/" + s.Stream.Name, Shards: s.Shards, Routing: s.Routing,
		Durable: s.Durable, Replicas: s.Replicas, RetentionBytes: s.RetentionBytes, RetentionAge: s.RetentionAge.String(),
		LogAppendTime: s.LogAppendTime, Compression: s.Compression, Implicit: s.Implicit, CreatedAt: s.CreatedAt.Format(time.RFC3339),
	}
}

// print prints streams as a table, or with --json as one JSON array.
func (o *streamOpts) print(list []client.StreamInfo) error {
	if o.json {
		docs := make([]streamDoc, len(list))
		for i, s := range list {
			docs[i] = streamJSON(s)
		}
		return printJSON(os.Stdout, docs)
	}
	if len(list) == 0 {
		fmt.Println("no streams")
		return nil
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "STREAM\tSHARDS\tROUTING\tKIND\tRETENTION\tCREATED")
	for _, s := range list {
		kind := "in-memory"
		if s.Implicit {
			kind = "in-memory (implicit)"
		}
		if s.Durable {
			kind = "durable"
		}
		if s.Replicas > 1 {
			kind = fmt.Sprintf("durable ×%d", s.Replicas)
		}
		if s.LogAppendTime {
			kind += ", log append time"
		}
		if s.Compression != "" {
			kind += ", fetched " + s.Compression
		}
		ret := "-"
		if s.RetentionBytes > 0 || s.RetentionAge > 0 {
			ret = fmt.Sprintf("%dB/%s", s.RetentionBytes, s.RetentionAge)
		}
		fmt.Fprintf(w, "%s/%s/%s\t%d\t%s\t%s\t%s\t%s\n", s.Stream.Tenant, s.Stream.Namespace, s.Stream.Name,
			s.Shards, s.Routing, kind, ret, s.CreatedAt.Format(time.RFC3339))
	}
	return w.Flush()
}
