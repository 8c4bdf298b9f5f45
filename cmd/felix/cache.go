package main

import (
	"context"
	"os"
	"strconv"
	"time"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

// cacheOpts are felix cache's and felix counter's flags: the connection's,
// with --cache in place of --stream.
type cacheOpts struct {
	conn      connOpts
	cache     string
	shards    uint32
	durable   bool
	replicas  uint32
	ttl       time.Duration
	history   uint32
	ifAbsent  bool
	ifVersion int64
	prefix    string
	limit     uint32
	// watch's
	key         string
	fromVersion string
	retained    bool
	json        bool
	count       int
	queueCap    int
}

func (o *cacheOpts) register(name string) *command {
	fs := newFlagSet(name)
	o.conn.register(fs)
	o.conn.registerTimeout(fs, time.Minute)
	_ = fs.MarkHidden("stream") // a cache is named by --cache
	fs.StringVar(&o.cache, "cache", "", "cache name (required)")
	return &command{name: name, flags: fs}
}

func newCacheCmd() *command {
	o := &cacheOpts{}
	c := o.register("cache")
	fs := c.flags
	fs.Uint32Var(&o.shards, "shards", 1, "create: the shard count; a key picks its shard")
	fs.BoolVar(&o.durable, "durable", false, "create: keep the cache on the broker's durable log (survives restarts)")
	fs.Uint32Var(&o.replicas, "replicas", 0, "create, durable only, in a cluster: keep each shard on this many members (0: the broker's default)")
	fs.DurationVar(&o.ttl, "ttl", 0, "create: the expiry of a put that names none; put: this put's expiry (0: none, or the cache's)")
	fs.Uint32Var(&o.history, "history", 1, "create: the changes per key compaction keeps below its horizon (1 to 64): what a watch resumed there can still see")
	fs.BoolVar(&o.ifAbsent, "if-absent", false, "put: only if the key is absent")
	fs.Int64Var(&o.ifVersion, "if-version", -1, "put, del: only if the key is at this version (the offset of the write that set it)")
	fs.StringVar(&o.prefix, "prefix", "", "ls: only keys starting with this")
	fs.Uint32Var(&o.limit, "limit", 100, "ls: at most this many keys")
	fs.StringVar(&o.key, "key", "", "watch: the key to watch (or --prefix)")
	fs.StringVar(&o.fromVersion, "from-version", "", "watch: resume at a version (every change from it on): V, or S:V,S:V per shard of a prefix watch")
	fs.BoolVar(&o.retained, "retained", false, "watch: print every watched key's current value first, then the changes")
	fs.BoolVar(&o.json, "json", false, "watch: print one JSON object per event")
	fs.IntVar(&o.count, "count", 0, "watch: exit after this many events (0: run until SIGINT or SIGTERM)")
	fs.IntVar(&o.queueCap, "queue-capacity", 0, "watch: ask the broker for this queue capacity per shard, in changes (0: the broker's default)")
	c.args = "create|info|put KEY VALUE|get KEY|del KEY|ls|watch"
	c.short = "create, write and read caches"
	c.long = `A cache is a stream of key writes: each shard keeps the newest value of
each of its keys. A key's version is the log offset of the write that set
it; --if-absent and --if-version make a put (or delete) conditional, judged
where the key's shard applies it. Keys expire after a TTL; an expiry is
written as a delete.

  felix cache create --cache C [--shards N] [--durable [--replicas R]] [--ttl D] [--history H]
  felix cache info --cache C
  felix cache put --cache C KEY VALUE [--ttl D] [--if-absent | --if-version V]
  felix cache get --cache C KEY
  felix cache del --cache C KEY [--if-version V]
  felix cache ls --cache C [--prefix P] [--limit N]
  felix cache watch --cache C (--key K | --prefix P) [--from-version V | --retained] [--json] [--count N] [--queue-capacity N]

Every command but watch prints JSON. watch prints each change as it
applies, "@VERSION KIND KEY VALUE" (or JSON with --json), from now, from a
version (a resume: nothing between is missed), or after the current value
of every watched key (--retained, marked "retained"), each shard's
snapshot followed by "@VERSION snapshot_end" (its keys are all printed,
even none; a resume answered by a snapshot is marked "resnapshot", and
keys it did not print were deleted meanwhile). It writes "watching"
to standard error once every change from then on will be printed, and runs
until --count events (snapshot ends among them) or SIGINT/SIGTERM; without --timeout it has no time
limit. A watch that falls behind exits 1 naming the --from-version to
resume with.`
	bounded := o.conn.bound(o.runCache)
	c.run = func(ctx context.Context, args []string) error {
		if len(args) > 0 && args[0] == "watch" && !fs.Changed("timeout") {
			o.conn.timeout = 0 // a watch runs until stopped
		}
		return bounded(ctx, args)
	}
	return c
}

func newCounterCmd() *command {
	o := &cacheOpts{}
	c := o.register("counter")
	c.args = "add KEY DELTA|get KEY"
	c.short = "add to and read a cache's counters"
	c.long = `Counters live in a cache beside its keys. An add is at least once: if its
answer is lost and it is sent again, it counts twice.

  felix counter add --cache C KEY DELTA     (a negative one after --: KEY -- -2)
  felix counter get --cache C KEY`
	c.run = o.conn.bound(o.runCounter)
	return c
}

// dial checks the flags and connects.
func (o *cacheOpts) dial(ctx context.Context) (*client.Client, func(), error) {
	if o.cache == "" {
		return nil, nil, usagef("--cache is required")
	}
	o.conn.stream = o.cache
	if err := o.conn.check(); err != nil {
		return nil, nil, err
	}
	return o.conn.dialClosing(ctx)
}

func (o *cacheOpts) ref() client.Cache {
	return client.Cache{Tenant: o.conn.tenant, Namespace: o.conn.namespace, Name: o.cache}
}

func (o *cacheOpts) runCache(ctx context.Context, args []string) error {
	want := map[string]int{"create": 0, "info": 0, "put": 2, "get": 1, "del": 1, "ls": 0, "watch": 0}
	if len(args) == 0 {
		return usagef("cache needs one of create, info, put, get, del, ls, watch")
	}
	n, ok := want[args[0]]
	if !ok || len(args)-1 != n {
		return usagef("cache %s takes %d arguments, got %q", args[0], n, args[1:])
	}
	c, done, err := o.dial(ctx)
	if err != nil {
		return err
	}
	defer done()
	k := o.ref()
	if args[0] == "watch" {
		return o.watch(ctx, c, k)
	}
	var out any
	switch args[0] {
	case "create":
		out, err = c.CreateCache(ctx, k, client.CacheSpec{Shards: o.shards, Durable: o.durable, Replicas: o.replicas, TTL: o.ttl, History: o.history})
	case "info":
		out, err = c.DescribeCache(ctx, k)
	case "put":
		var res wire.CacheResult
		res, err = c.Put(ctx, k, args[1], []byte(args[2]), client.PutOptions{TTL: o.ttl, IfAbsent: o.ifAbsent, IfVersion: o.version()})
		out = resultDoc(res)
	case "get":
		var v wire.CacheValue
		v, err = c.Get(ctx, k, args[1])
		out = valueDoc(v)
	case "del":
		var res wire.CacheResult
		res, err = c.Delete(ctx, k, args[1], o.version())
		out = resultDoc(res)
	default:
		out, err = o.list(ctx, c, k)
	}
	if err != nil {
		return err
	}
	return printJSON(os.Stdout, out)
}

// version is --if-version, nil when not given.
func (o *cacheOpts) version() *uint64 {
	if o.ifVersion < 0 {
		return nil
	}
	v := uint64(o.ifVersion)
	return &v
}

// list reads every shard's keys with the prefix, in pages, up to --limit.
func (o *cacheOpts) list(ctx context.Context, c *client.Client, k client.Cache) ([]cacheValueDoc, error) {
	info, err := c.DescribeCache(ctx, k)
	if err != nil {
		return nil, err
	}
	out := []cacheValueDoc{}
	for shard := range info.Shards {
		for after := ""; uint32(len(out)) < o.limit; {
			page, err := c.ListShard(ctx, k, shard, o.prefix, after, o.limit-uint32(len(out)))
			if err != nil {
				return nil, err
			}
			for _, e := range page.Entries {
				out = append(out, valueDoc(e))
			}
			if after = page.Next; after == "" {
				break
			}
		}
	}
	return out, nil
}

// cacheValueDoc is a key as the CLI prints it: the value as text.
type cacheValueDoc struct {
	Key       string `json:"key"`
	Found     bool   `json:"found"`
	Value     string `json:"value,omitempty"`
	Version   uint64 `json:"version"`
	ExpiresMS int64  `json:"expires_ms,omitempty"`
}

func valueDoc(v wire.CacheValue) cacheValueDoc {
	return cacheValueDoc{Key: v.Key, Found: v.Found, Value: string(v.Value), Version: v.Version, ExpiresMS: v.ExpiresMS}
}

// cacheResultDoc is a write's answer as the CLI prints it.
type cacheResultDoc struct {
	Applied bool   `json:"applied"`
	Reason  string `json:"reason,omitempty"`
	Version uint64 `json:"version"`
	Present bool   `json:"present"`
	Prev    string `json:"prev,omitempty"`
}

func resultDoc(r wire.CacheResult) cacheResultDoc {
	return cacheResultDoc{Applied: r.Applied, Reason: r.Reason, Version: r.Version, Present: r.Present, Prev: string(r.Prev)}
}

func (o *cacheOpts) runCounter(ctx context.Context, args []string) error {
	switch {
	case len(args) == 3 && args[0] == "add":
	case len(args) == 2 && args[0] == "get":
	default:
		return usagef("counter needs add KEY DELTA or get KEY, got %q", args)
	}
	var delta int64
	if args[0] == "add" {
		var err error
		if delta, err = strconv.ParseInt(args[2], 10, 64); err != nil {
			return usagef("counter add: DELTA %q is not an integer", args[2])
		}
	}
	c, done, err := o.dial(ctx)
	if err != nil {
		return err
	}
	defer done()
	var v wire.CounterValue
	if args[0] == "add" {
		v, err = c.CounterAdd(ctx, o.ref(), args[1], delta)
	} else {
		v, err = c.CounterGet(ctx, o.ref(), args[1])
	}
	if err != nil {
		return err
	}
	return printJSON(os.Stdout, v)
}
