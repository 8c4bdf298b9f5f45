package loadgen

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/config"
	"github.com/getfelix/felix-go/internal/quicconf"
)

// embeddedStopTimeout bounds the embedded broker's shutdown at the end of a
// run: connections closed, actors stopped.
const embeddedStopTimeout = 10 * time.Second

// target is the broker under test: embedded, or reached at an address.
type target struct {
	addr  string
	opts  client.Options
	drops func(context.Context) (int64, error) // nil: unknown
	stop  func()
}

func startTarget(cfg Config) (*target, error) {
	if cfg.Addr != "" {
		t := &target{addr: cfg.Addr, opts: cfg.Client, stop: func() {}}
		if cfg.Admin != "" {
			t.drops = func(ctx context.Context) (int64, error) { return scrapeDrops(ctx, cfg.Admin) }
		}
		return t, nil
	}
	return startEmbedded(cfg)
}

// startEmbedded starts a broker in this process for one run, in a temporary
// data directory that its stop removes.
func startEmbedded(cfg Config) (*target, error) {
	dir, err := os.MkdirTemp("", "felix-bench-")
	if err != nil {
		return nil, err
	}
	bc := config.Default()
	bc.Listen = "127.0.0.1:0"
	bc.Admin = ""
	bc.DataDir = dir
	bc.SubscriberQueuePolicy = cfg.Policy
	if cfg.Fsync != "" {
		bc.DurableFsync = cfg.Fsync
	}
	if cfg.Policy == "block" {
		bc.SubscriberLaneQueuePolicy = "block" // lossless end to end, so every message is accounted for
	}
	b, err := broker.New(bc)
	if err == nil {
		err = b.Start()
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start the embedded broker: %w", err)
	}
	// The embedded broker wrote its admin token (full rights on tenant
	// default) beside its certificate.
	token, err := auth.ReadToken(filepath.Join(dir, auth.AdminTokenFile))
	if err != nil {
		_ = b.Stop(context.Background())
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start the embedded broker: %w", err)
	}
	return &target{
		addr: b.Addr().String(),
		opts: client.Options{CAFile: filepath.Join(dir, quicconf.CertFile), Token: token},
		// Read the registry directly: the embedded broker serves no admin
		// address, and there is no text to parse.
		drops: func(context.Context) (int64, error) {
			mfs, err := b.Metrics().Registry.Gather()
			if err != nil {
				return 0, err
			}
			sum, _ := sumFamilies(mfs, dropCounters)
			return int64(sum), nil
		},
		stop: func() {
			ctx, cancel := context.WithTimeout(context.Background(), embeddedStopTimeout)
			defer cancel()
			_ = b.Stop(ctx)
			os.RemoveAll(dir)
		},
	}, nil
}
