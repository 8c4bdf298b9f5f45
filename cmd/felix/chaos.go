package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/getfelix/felix-go/broker"
)

type chaosOpts struct {
	admin    adminOpts
	path     string
	kind     string
	kinds    string
	count    int
	mode     string
	interval time.Duration
	duration time.Duration
	json     bool
}

func newChaosCmd() *command {
	o := &chaosOpts{}
	fs := newFlagSet("chaos")
	o.admin.register(fs)
	fs.StringVar(&o.path, "path", "", "kill: the actor at this path (see felix tree)")
	fs.StringVar(&o.kind, "kind", "", "kill: actors of this kind, at random: shard, feeder, lane, connection_writer, group")
	fs.IntVar(&o.count, "count", 1, "kill: how many actors of --kind")
	fs.StringVar(&o.mode, "mode", "panic", "panic (the actor crashes inside its Receive and its supervisor restarts it) or stop (removed for good)")
	fs.StringVar(&o.kinds, "kinds", "feeder,lane", "run: the kinds to kill from, comma-separated")
	fs.DurationVar(&o.interval, "interval", time.Second, "run: time between kills")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "run: how long to keep killing")
	fs.BoolVar(&o.json, "json", false, "print one JSON object per kill")
	c := &command{
		name:  "chaos",
		args:  "kill|run",
		short: "crash or stop a broker's actors (the broker must run with --chaos)",
		long: `Kills actors through the broker's admin endpoint, to test that a crash loses
nothing that was promised. The broker refuses unless it was started with
--chaos.

  felix chaos kill (--path P | --kind K [--count N]) [--mode panic|stop]
  felix chaos run --kinds feeder,lane --interval 1s --duration 10s [--mode panic|stop]

kill kills once; run kills one actor of a random kind from --kinds every
--interval for --duration and prints what it killed.`,
		flags: fs,
	}
	c.run = o.admin.withContext(fs, o.run)
	return c
}

func (o *chaosOpts) run(ctx context.Context, args []string) error {
	if len(args) != 1 || (args[0] != "kill" && args[0] != "run") {
		return usagef("chaos needs kill or run, got %q", args)
	}
	if o.mode != "panic" && o.mode != "stop" {
		return usagef("--mode must be panic or stop, got %q", o.mode)
	}
	if args[0] == "kill" {
		if (o.path == "") == (o.kind == "") {
			return usagef("kill needs --path or --kind (one of them)")
		}
		return o.kill(ctx, broker.KillRequest{Path: o.path, Kind: o.kind, Count: o.count, Mode: o.mode})
	}
	kinds := strings.Split(o.kinds, ",")
	if o.interval <= 0 || o.duration <= 0 {
		return usagef("--interval and --duration must be positive")
	}
	deadline := time.Now().Add(o.duration)
	tick := time.NewTicker(o.interval)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		kind := strings.TrimSpace(kinds[rand.IntN(len(kinds))])
		if err := o.kill(ctx, broker.KillRequest{Kind: kind, Count: 1, Mode: o.mode}); err != nil {
			fmt.Fprintf(os.Stderr, "felix: kill %s: %v\n", kind, err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
	return nil
}

func (o *chaosOpts) kill(ctx context.Context, req broker.KillRequest) error {
	var res broker.KillResult
	if err := o.admin.call(ctx, http.MethodPost, "/debug/chaos/kill", req, &res); err != nil {
		return err
	}
	if o.json {
		if err := printJSON(os.Stdout, res); err != nil {
			return err
		}
	} else {
		for _, p := range res.Killed {
			fmt.Printf("%s %s\n", res.Mode, p)
		}
	}
	if len(res.Killed) == 0 {
		return fmt.Errorf("no live actor of kind %s to kill: felix tree --kind %s lists them (the kinds: shard, feeder, lane, connection_writer, group)", req.Kind, req.Kind)
	}
	return nil
}
