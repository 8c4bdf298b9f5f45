package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"time"
	"unicode/utf8"

	"github.com/spf13/pflag"

	"github.com/getfelix/felix-go/client"
)

type readOpts struct {
	conn     connOpts
	shard    uint32
	from     uint64
	fromTime string
	max      int
	json     bool
	// followerLag asks for follower reads (ReadOptions.FollowerMaxLag).
	followerLag time.Duration
	flags       *pflag.FlagSet
}

func newReadCmd() *command {
	fs := newFlagSet("read")
	o := &readOpts{flags: fs}
	o.conn.register(fs)
	o.conn.registerTimeout(fs, time.Minute)
	fs.Uint32Var(&o.shard, "shard", 0, "the shard to read")
	fs.Uint64Var(&o.from, "from", 0, "the first offset to read")
	fs.StringVar(&o.fromTime, "from-time", "", fromTimeUsage)
	fs.IntVar(&o.max, "max", 0, "stop after this many records (0: read up to the committed end)")
	fs.BoolVar(&o.json, "json", false, `print one JSON object per record: {"offset":N,"time":"...","payload":"...","key":"...","headers":[{"key":"...","value":"..."}]} (key and headers when the record has them)`)
	fs.DurationVar(&o.followerLag, "follower-max-lag", 0, "on a replicated stream, let any replica answer from what it applied if it heard from its leader within this long (at most 1m; 0: only the leader answers, with every acknowledged record)")
	c := &command{
		name:  "read",
		short: "read a durable stream's records from an offset",
		long: `Reads the committed records of a durable stream's shard from --from, page by
page, and prints one payload per line (or --json objects with the offset). It
stops at the committed end or after --max records; it never waits for new
records (use felix sub for that). --from-time starts at the first record the
broker stored at or after a time instead. On a replicated stream only the
shard's leader answers (a read sees every record acknowledged before it);
--follower-max-lag lets a follower answer from its own copy.

Examples:
  felix read --stream orders --from 0
  felix read --stream orders --from-time 2026-01-02T15:04:05Z
  felix read --stream orders --shard 2 --from 1000 --max 10 --json`,
		flags: fs,
	}
	c.run = o.conn.bound(o.run)
	return c
}

func (o *readOpts) run(ctx context.Context, args []string) error {
	if len(args) > 0 {
		return usagef("read takes no arguments, got %q", args)
	}
	if err := o.conn.check(); err != nil {
		return err
	}
	if o.max < 0 {
		return usagef("--max must not be negative")
	}
	if o.followerLag < 0 || o.followerLag > time.Minute {
		return usagef("--follower-max-lag must be between 0 and 1m")
	}
	var at time.Time
	byTime := o.flags.Changed("from-time")
	if byTime {
		if o.flags.Changed("from") {
			return usagef("--from and --from-time both say where to start: give one")
		}
		var err error
		if at, err = parseFromTime(o.fromTime); err != nil {
			return err
		}
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
	if byTime {
		if o.from, err = offsetForTime(ctx, c, &o.conn, o.shard, at); err != nil {
			return err
		}
	}
	out := bufio.NewWriterSize(os.Stdout, stdoutBuffer)
	defer out.Flush()
	enc := json.NewEncoder(out)
	from, n := o.from, 0
	for o.max == 0 || n < o.max {
		opts := client.ReadOptions{Shard: o.shard, FollowerMaxLag: o.followerLag}
		if o.max > 0 {
			opts.MaxRecords = uint32(min(o.max-n, 10000))
		}
		page, err := c.Read(ctx, o.conn.streamRef(), from, opts)
		if err != nil {
			return fmt.Errorf("read %s shard %d from %d: %w", o.conn.scope(), o.shard, from, err)
		}
		for _, r := range page.Records {
			if o.json {
				row := recordJSON(r)
				if err := enc.Encode(row); err != nil {
					return err
				}
			} else {
				out.Write(r.Payload)
				out.WriteByte('\n')
			}
			n++
		}
		if len(page.Records) == 0 || page.Next >= page.Committed {
			break
		}
		from = page.Next
	}
	return nil
}

// fromTimeUsage is --from-time's help, the same for read and sub.
const fromTimeUsage = "start at the first record stored at or after this time, RFC 3339 (2026-01-02T15:04:05Z, " +
	"2026-01-02T16:04:05.250+01:00); durable streams only; not with --from"

// parseFromTime reads --from-time: RFC 3339, with or without fractions of
// a second.
func parseFromTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, usagef("--from-time must be an RFC 3339 time such as 2026-01-02T15:04:05Z or 2026-01-02T16:04:05.250+01:00, got %q", s)
	}
	return t, nil
}

// offsetForTime resolves --from-time to the offset of shard's first record
// stored at or after t (the committed end when every record is older), so
// that the command then runs as with --from at that offset.
func offsetForTime(ctx context.Context, c *client.Client, conn *connOpts, shard uint32, t time.Time) (uint64, error) {
	off, err := c.OffsetForTime(ctx, conn.streamRef(), t, shard)
	if err != nil {
		return 0, fmt.Errorf("find time %s in %s shard %d: %w", t.Format(time.RFC3339Nano), conn.scope(), shard, err)
	}
	return off, nil
}

// recordJSON is a record as read --json prints it: its offset and time,
// its payload, and its key and headers when it has them. Bytes that are
// UTF-8 print as text (payload, key, value), others as base64 (the same
// name with _base64); a null header value prints as null.
func recordJSON(r client.Record) map[string]any {
	row := map[string]any{"offset": r.Offset, "time": r.Time}
	putBytes(row, "payload", r.Payload)
	if r.Key != nil {
		putBytes(row, "key", r.Key)
	}
	if len(r.Headers) > 0 {
		hs := make([]map[string]any, len(r.Headers))
		for i, h := range r.Headers {
			hs[i] = map[string]any{"key": h.Key}
			if h.Value == nil {
				hs[i]["value"] = nil
			} else {
				putBytes(hs[i], "value", h.Value)
			}
		}
		row["headers"] = hs
	}
	return row
}

// putBytes sets m[name] to b as text, or m[name+"_base64"] when b is not
// UTF-8.
func putBytes(m map[string]any, name string, b []byte) {
	if utf8.Valid(b) {
		m[name] = string(b)
	} else {
		m[name+"_base64"] = base64.StdEncoding.EncodeToString(b)
	}
}
