package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"unicode/utf8"

	"github.com/getfelix/felix-go/client"
)

type readOpts struct {
	conn  connOpts
	shard uint32
	from  uint64
	max   int
	json  bool
}

func newReadCmd() *command {
	o := &readOpts{}
	fs := newFlagSet("read")
	o.conn.register(fs)
	fs.Uint32Var(&o.shard, "shard", 0, "the shard to read")
	fs.Uint64Var(&o.from, "from", 0, "the first offset to read")
	fs.IntVar(&o.max, "max", 0, "stop after this many records (0: read up to the committed end)")
	fs.BoolVar(&o.json, "json", false, `print one JSON object per record: {"offset":N,"payload":"..."}`)
	c := &command{
		name:  "read",
		short: "read a durable stream's records from an offset",
		long: `Reads the committed records of a durable stream's shard from --from, page by
page, and prints one payload per line (or --json objects with the offset). It
stops at the committed end or after --max records; it never waits for new
records (use felix sub for that).

Examples:
  felix read --stream orders --from 0
  felix read --stream orders --shard 2 --from 1000 --max 10 --json`,
		flags: fs,
	}
	c.run = o.run
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
	c, err := o.conn.dial(ctx)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		_ = c.Close(cctx)
	}()
	out := bufio.NewWriterSize(os.Stdout, stdoutBuffer)
	defer out.Flush()
	enc := json.NewEncoder(out)
	from, n := o.from, 0
	for o.max == 0 || n < o.max {
		opts := client.ReadOptions{Shard: o.shard}
		if o.max > 0 {
			opts.MaxRecords = uint32(min(o.max-n, 10000))
		}
		page, err := c.Read(ctx, o.conn.streamRef(), from, opts)
		if err != nil {
			return fmt.Errorf("read %s shard %d from %d: %w", o.conn.scope(), o.shard, from, err)
		}
		for _, r := range page.Records {
			if o.json {
				row := map[string]any{"offset": r.Offset, "time": r.Time}
				if utf8.Valid(r.Payload) {
					row["payload"] = string(r.Payload)
				} else {
					row["payload_base64"] = base64.StdEncoding.EncodeToString(r.Payload)
				}
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
