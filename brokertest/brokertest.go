// Package brokertest starts real brokers on 127.0.0.1:0 for tests and
// benchmarks, and dials clients to them.
package brokertest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/config"
	"github.com/getfelix/felix-go/internal/quicconf"
)

// Config returns a default config listening on a free loopback port, with
// its data directory under tb's temp dir.
func Config(tb testing.TB) config.Config {
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.DataDir = tb.TempDir()
	cfg.Admin = "" // tests that need the admin endpoint set 127.0.0.1:0
	return cfg
}

// Start starts a broker with cfg and stops it when tb ends.
func Start(tb testing.TB, cfg config.Config, opts ...broker.Option) *broker.Broker {
	tb.Helper()
	b, err := broker.New(cfg, opts...)
	if err != nil {
		tb.Fatalf("broker.New: %v", err)
	}
	if err := b.Start(); err != nil {
		tb.Fatalf("broker.Start: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.Stop(ctx); err != nil {
			tb.Errorf("broker.Stop: %v", err)
		}
	})
	return b
}

// Dial connects a client trusting the broker's generated certificate, and
// closes it when tb ends.
func Dial(tb testing.TB, b *broker.Broker, cfg config.Config) *client.Client {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, b.Addr().String(), client.Options{CAFile: filepath.Join(cfg.DataDir, quicconf.CertFile), Token: Token(tb, cfg, "default")})
	if err != nil {
		tb.Fatalf("client.Dial: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

// Context is a context that ends after d or with the test, whichever is
// first: every wait of a test is bounded by one.
func Context(tb testing.TB, d time.Duration) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}

// ExpectNext fails unless sub's next event is want. Publishing a sentinel
// after a run and seeing it next proves nothing was duplicated in between.
func ExpectNext(tb testing.TB, ctx context.Context, who string, sub *client.Subscription, want string) {
	tb.Helper()
	ev, err := sub.Next(ctx)
	if err != nil {
		tb.Fatalf("%s: waiting for %q: %v", who, want, err)
	}
	if string(ev.Payload) != want {
		tb.Fatalf("%s: next event = %q, want %q", who, ev.Payload, want)
	}
}
