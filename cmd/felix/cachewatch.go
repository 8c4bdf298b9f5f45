package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

// watch runs felix cache watch: it prints each event until --count, the
// context's end (a signal) or the watch's.
func (o *cacheOpts) watch(ctx context.Context, c *client.Client, k client.Cache) error {
	target, from, err := o.watchArgs()
	if err != nil {
		return err
	}
	w, err := c.Watch(ctx, k, target, from)
	if err != nil {
		return err
	}
	defer w.Close(context.WithoutCancel(ctx))
	fmt.Fprintln(os.Stderr, "watching")
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for n := 0; o.count == 0 || n < o.count; n++ {
		ev, err := w.Next(ctx)
		var lag *client.WatchLaggedError
		switch {
		case errors.As(err, &lag):
			_ = out.Flush()
			how := "--from-version " + versionsArg(w.Resume())
			if lag.Retained {
				how = "--retained (the snapshot was cut short)"
			}
			return fmt.Errorf("the watch fell behind on shard %d; watch again with %s", lag.Shard, how)
		case err != nil && ctx.Err() != nil:
			return nil // stopped by a signal or --timeout
		case err != nil:
			return err
		}
		if err := o.printEvent(out, ev); err != nil {
			return err
		}
		if err := out.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// watchArgs checks watch's flags.
func (o *cacheOpts) watchArgs() (client.WatchTarget, client.WatchFrom, error) {
	var target client.WatchTarget
	switch {
	case o.key != "" && o.prefix != "":
		return target, client.WatchFrom{}, usagef("watch takes --key or --prefix, not both")
	case o.key != "":
		target = client.WatchKey(o.key)
	default:
		target = client.WatchPrefix(o.prefix) // "" watches every key
	}
	from := client.WatchFrom{Retained: o.retained, QueueCapacity: o.queueCap}
	if o.fromVersion == "" {
		return target, from, nil
	}
	if o.retained {
		return target, from, usagef("watch takes --from-version or --retained, not both")
	}
	versions, err := parseVersions(o.fromVersion)
	if err != nil {
		return target, from, err
	}
	from.Versions = versions
	return target, from, nil
}

// parseVersions reads --from-version: V (shard 0's, or a key watch's
// shard's), or S:V,S:V.
func parseVersions(s string) (map[uint32]uint64, error) {
	out := map[uint32]uint64{}
	for _, part := range strings.Split(s, ",") {
		shard, version, pair := strings.Cut(part, ":")
		if !pair {
			shard, version = "0", part
		}
		n, err := strconv.ParseUint(shard, 10, 32)
		if err != nil {
			return nil, usagef("--from-version %q: shard %q is not a number", s, shard)
		}
		v, err := strconv.ParseUint(version, 10, 64)
		if err != nil {
			return nil, usagef("--from-version %q: version %q is not a number", s, version)
		}
		out[uint32(n)] = v
	}
	return out, nil
}

// versionsArg writes versions as --from-version takes them.
func versionsArg(versions map[uint32]uint64) string {
	shards := make([]uint32, 0, len(versions))
	for n := range versions {
		shards = append(shards, n)
	}
	sort.Slice(shards, func(i, j int) bool { return shards[i] < shards[j] })
	parts := make([]string, 0, len(shards))
	for _, n := range shards {
		parts = append(parts, fmt.Sprintf("%d:%d", n, versions[n]))
	}
	return strings.Join(parts, ",")
}

// watchEventDoc is a watch event as --json prints it.
type watchEventDoc struct {
	Shard      uint32 `json:"shard"`
	Kind       string `json:"kind"`
	Key        string `json:"key,omitempty"`
	Value      string `json:"value,omitempty"`
	Version    uint64 `json:"version"`
	Retained   bool   `json:"retained,omitempty"`
	Resnapshot bool   `json:"resnapshot,omitempty"`
	Commit     bool   `json:"commit,omitempty"`
}

func (o *cacheOpts) printEvent(out *bufio.Writer, ev client.WatchEvent) error {
	if o.json {
		b, err := json.Marshal(watchEventDoc{Shard: ev.Shard, Kind: ev.Kind.String(), Key: ev.Key, Value: string(ev.Value),
			Version: ev.Version, Retained: ev.Retained, Resnapshot: ev.Resnapshot, Commit: ev.Commit})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "%s\n", b)
		return err
	}
	line := fmt.Sprintf("@%d %s", ev.Version, ev.Kind)
	if ev.Key != "" {
		line += " " + ev.Key
	}
	if len(ev.Value) > 0 {
		line += " " + string(ev.Value)
	}
	switch {
	case ev.Resnapshot:
		line += " (resnapshot)"
	case ev.Retained && ev.Kind != wire.WatchSnapshotEnd:
		line += " (retained)"
	}
	_, err := fmt.Fprintln(out, line)
	return err
}
