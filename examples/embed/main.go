// Command embed runs a Felix broker inside a host program's own protoactor
// actor system, publishes to it with the Go client, and stops everything
// cleanly. Run it with: go run ./examples/embed
//
// It binds free ports by default (-listen and -admin 127.0.0.1:0), so it
// runs beside a broker on the usual 5000 and 5080; an empty -admin turns the
// admin endpoint off. Its log is coloured on a terminal only.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
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
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "embed:", err)
		os.Exit(1)
	}
}

func run(args []string, stderr *os.File) error {
	fs := flag.NewFlagSet("embed", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	listen := fs.String("listen", "127.0.0.1:0", "the broker's felix/1 (UDP) address; port 0 picks a free one")
	admin := fs.String("admin", "127.0.0.1:0", "the broker's admin endpoint (TCP); port 0 picks a free one, '' turns it off")
	if err := fs.Parse(args); err != nil {
		fs.SetOutput(stderr)
		fs.PrintDefaults()
		return err
	}
	// Colour is for a person at a terminal, not for a file or a pipe.
	log := zerolog.New(zerolog.ConsoleWriter{Out: stderr, NoColor: !isTerminal(stderr)}).With().Timestamp().Logger()
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
	// Not the defaults' 5000 and 5080: a broker may be running there.
	cfg.Listen, cfg.Admin = *listen, *admin
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

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
