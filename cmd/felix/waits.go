package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

const (
	// waitNoticeAfter is how long a client command waits on a shard no
	// member serves before it says so: long enough that a leader election
	// or a shard move (well under a second) passes silently, short enough
	// that nobody wonders whether it hangs.
	waitNoticeAfter = 3 * time.Second
	// waitNoticeEvery is how often it says so again while the wait lasts.
	waitNoticeEvery = 15 * time.Second
)

// timeoutError is the cause of a command's context ending at --timeout.
type timeoutError struct{ d time.Duration }

func (e timeoutError) Error() string { return fmt.Sprintf("--timeout %s passed", e.d) }

// registerTimeout adds --timeout to a client command, def its default
// (0: none, for the commands that may run until interrupted).
func (o *connOpts) registerTimeout(fs *pflag.FlagSet, def time.Duration) {
	usage := "give up after this long, waits included (0: no limit; Ctrl-C ends it)"
	if def > 0 {
		usage = "give up after this long, waits included (0: no limit)"
	}
	fs.DurationVar(&o.timeout, "timeout", def, usage)
}

// bound is run with the felix context applied, under --timeout (see
// bounded).
func (o *connOpts) bound(run func(context.Context, []string) error) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		if err := o.applyContext(o.flags.Changed); err != nil {
			return err
		}
		return o.bounded(ctx, func(ctx context.Context) error { return run(ctx, args) })
	}
}

// bounded runs do under --timeout. An error once the timeout passed says
// so, since the error itself is often only "context deadline exceeded".
func (o *connOpts) bounded(ctx context.Context, do func(context.Context) error) error {
	if o.timeout < 0 {
		return usagef("--timeout must not be negative, got %s", o.timeout)
	}
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, o.timeout, timeoutError{o.timeout})
		defer cancel()
	}
	err := do(ctx)
	var te timeoutError
	if err != nil && errors.As(context.Cause(ctx), &te) && !errors.As(err, &te) && !strings.Contains(err.Error(), "--timeout") {
		return fmt.Errorf("gave up after --timeout %s: %w", o.timeout, err)
	}
	return err
}

// unfinished is the error of a command whose context ended (Ctrl-C,
// SIGTERM or --timeout) before it did what it was asked; what says how far
// it got. It exits 1: a script must not take a cut-short run for a
// finished one.
func unfinished(ctx context.Context, what string) error {
	var te timeoutError
	switch {
	case errors.As(context.Cause(ctx), &te):
		return fmt.Errorf("gave up after --timeout %s: %s", te.d, what)
	case ctx.Err() != nil:
		return fmt.Errorf("interrupted: %s", what)
	}
	return fmt.Errorf("stopped early: %s", what)
}

// waitNotice tells the user, on stderr, what a client command waits for
// when the cluster client keeps retrying a call that no member answers:
// first after waitNoticeAfter, then every waitNoticeEvery.
type waitNotice struct {
	w       io.Writer
	timeout time.Duration
	mu      struct {
		sync.Mutex
		printed time.Duration // the wait last reported; 0 before the first
	}
}

func (n *waitNotice) retrying(r client.Retry) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case r.Waited < waitNoticeAfter:
		return
	case n.mu.printed > 0 && r.Waited >= n.mu.printed && r.Waited-n.mu.printed < waitNoticeEvery:
		return // reported lately (a wait shorter than the one reported is another, new one)
	}
	n.mu.printed = r.Waited
	bound := "Ctrl-C ends the wait (or bound it with --timeout)"
	if n.timeout > 0 {
		bound = fmt.Sprintf("it gives up at --timeout %s", n.timeout)
	}
	fmt.Fprintf(n.w, "still waiting after %s for %s: %s; %s\n",
		r.Waited.Round(time.Second), r.Stream.Tenant+"/"+r.Stream.Namespace+"/"+r.Stream.Name, waitReason(r.Err), bound)
}

// waitReason says what a retried call waits for, from its last error.
func waitReason(err error) string {
	var we *wire.Error
	switch {
	case errors.As(err, &we) && we.Code == wire.CodeShardUnavailable:
		return "no member serves the shard now (no leader elected yet, its member down, or the members cut off from etcd): " + we.Message
	case errors.As(err, &we) && we.Code == wire.CodeDraining:
		return "the shard's member is draining and its shard is moving: " + we.Message
	case errors.As(err, &we):
		return we.Error()
	}
	return "no broker answers: " + err.Error()
}

// noticeWaits makes the client options report retried waits on stderr.
func (o *connOpts) noticeWaits(opts *client.Options) {
	n := &waitNotice{w: os.Stderr, timeout: o.timeout}
	opts.Retrying = n.retrying
}
