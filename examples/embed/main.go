// Command embed runs a Felix broker inside a host program's own protoactor
// actor system, publishes to it with the Go client, and stops everything
// cleanly. Run it with: go run ./examples/embed
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/config"
	"github.com/getfelix/felix-go/transport"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "embed:", err)
		os.Exit(1)
	}
}

func run() error {
	log := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).With().Timestamp().Logger()
	// The host's actor system: the broker's actors live in it beside the
	// host's own, under the name "felix".
	system := actor.NewActorSystem(actors.LoggerFactory(log))
	defer system.Shutdown()

	dataDir, err := os.MkdirTemp("", "felix-embed-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dataDir)
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.DataDir = dataDir

	b, err := broker.New(cfg, broker.WithActorSystem(system), broker.WithLogger(log))
	if err != nil {
		return err
	}
	if err := b.Start(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	defer b.Stop(ctx)

	// On first start the broker made a signing key and admin.token (full
	// rights on tenant default) in its data directory.
	token, err := auth.ReadToken(filepath.Join(dataDir, auth.AdminTokenFile))
	if err != nil {
		return err
	}
	c, err := client.Dial(ctx, b.Addr().String(), client.Options{CAFile: filepath.Join(dataDir, transport.CertFile), Token: token})
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	st := client.Stream{Name: "greetings"}
	sub, err := c.Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		return err
	}
	if err := c.Publish(ctx, st, []byte("hello from an embedded broker"), client.PublishOptions{}); err != nil {
		return err
	}
	ev, err := sub.Next(ctx)
	if err != nil {
		return err
	}
	fmt.Println(string(ev.Payload))
	return nil
}
