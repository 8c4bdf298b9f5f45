package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/pflag"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/config"
	"github.com/getfelix/felix-go/internal/quicconf"
)

// stopTimeout bounds a clean shutdown: connections closed, actors stopped.
const stopTimeout = 10 * time.Second

type brokerOpts struct {
	listen, dataDir, addrFile, logLevel string // the CLI-owned knobs
	configFile                          string
	logFormat                           string
	printConfig                         bool

	flags *pflag.FlagSet
	knobs *config.Flags
}

func newBrokerCmd() *command {
	o := &brokerOpts{}
	def := config.Default()
	own := newFlagSet("broker")
	own.StringVar(&o.listen, "listen", def.Listen, config.FlagUsage("listen"))
	own.StringVar(&o.dataDir, "data-dir", def.DataDir, config.FlagUsage("data_dir"))
	own.StringVar(&o.configFile, "config", "", "YAML config file of knob names (as --print-config prints them)")
	own.StringVar(&o.addrFile, "addr-file", "", config.FlagUsage("addr_file"))
	own.StringVar(&o.logLevel, "log-level", def.LogLevel, config.FlagUsage("log_level"))
	own.StringVar(&o.logFormat, "log-format", "auto", "console, json, or auto: console when stderr is a terminal, else json")
	own.BoolVar(&o.printConfig, "print-config", false, "print the effective configuration as YAML and exit")

	knobs := newFlagSet("broker knobs")
	o.knobs = config.RegisterFlags(knobs)
	o.flags = newFlagSet("broker")
	o.flags.AddFlagSet(own)
	o.flags.AddFlagSet(knobs) // the same *pflag.Flag values, so o.knobs sees what Parse set

	c := &command{
		name:  "broker",
		short: "run a broker",
		long: `Runs a broker until SIGINT or SIGTERM, then stops it cleanly. SIGHUP
reloads the --auth-keys file and the TLS certificate and key files
(--tls-cert, --tls-key, or the self-signed pair in --data-dir) for new
felix/1 and Kafka connections; a bad file keeps what is in force.

Clients need a token (unless --auth none). On first start the broker writes
DATA_DIR/admin.token, full rights on tenant default; clients started in the
folder holding ./felix-data use it with no flags, others pass --token or
FELIX_TOKEN, minted with felix token create --data-dir DATA_DIR.

Configuration is read from, in increasing precedence: the defaults, the
--config file, FELIX_* environment variables, and flags. An unknown key or
FELIX_ variable is an error, not ignored (FELIX_TOKEN, the clients', is
skipped). With no --tls-cert and --tls-key
the broker generates a self-signed certificate into --data-dir; clients
started in the folder holding ./felix-data trust it with no flags, others
pass --ca DATA_DIR/cert.pem.`,
		flags: o.flags,
		sections: []flagSection{
			{"Flags", own},
			{"Broker knobs (also --config keys and FELIX_* variables, as named)", knobs},
		},
	}
	c.run = o.run
	return c
}

func (o *brokerOpts) run(ctx context.Context, args []string) error {
	if len(args) > 0 {
		return usagef("broker takes no arguments, got %q", args)
	}
	cfg, err := o.config()
	if err != nil {
		return usageError{err}
	}
	verr := validate(cfg)
	if o.printConfig {
		// Printed even when invalid: seeing the effective values is how one
		// finds which source set the refused one.
		out, err := cfg.YAML()
		if err != nil {
			return err
		}
		if _, err := os.Stdout.Write(out); err != nil {
			return err
		}
	}
	if verr != nil {
		return usageError{verr}
	}
	if o.printConfig {
		return nil
	}

	log, err := newLogger(o.logFormat, cfg.LogLevel)
	if err != nil {
		return usageError{err}
	}
	b, err := broker.New(cfg, broker.WithLogger(log))
	if err != nil {
		return err
	}
	if err := b.Start(); err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("%w (is another broker running? pick a free address with --listen, or port 0 for any)", err)
		}
		return err
	}
	if cfg.TLSCert == "" {
		log.Info().Str("ca", filepath.Join(cfg.DataDir, quicconf.CertFile)).
			Msg("self-signed certificate: clients in this folder trust it; elsewhere pass --ca with this file")
	}
	return serveUntilDone(ctx, b, cfg, log)
}

// serveUntilDone runs b until ctx ends or b stops itself, then stops it.
// A cluster member configured for another cluster than etcd holds can
// never join, and a broker that lost a core actor has stopped itself:
// either way it exits with the error (status 1), rather than serve
// nothing.
func serveUntilDone(ctx context.Context, b *broker.Broker, cfg config.Config, log zerolog.Logger) error {
	ctx, stopRun := context.WithCancelCause(ctx)
	defer stopRun(nil)
	fatal := make(chan error, 1)
	go func() {
		select {
		case err := <-b.Fatal():
			fatal <- err
			stopRun(err)
		case <-ctx.Done():
		}
	}()
	reloaded := reloadOnHangup(ctx, b, cfg.Auth == "none", log)
	memDone := make(chan struct{})
	go func() {
		defer close(memDone)
		returnIdleMemory(ctx)
	}()
	<-ctx.Done()
	<-reloaded
	<-memDone
	stopOnSignal()
	log.Info().Str("cause", context.Cause(ctx).Error()).Stringer("timeout", stopTimeout).
		Msg("stopping broker (signal again to force)")
	stopCtx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if err := b.Stop(stopCtx); err != nil {
		return fmt.Errorf("stop broker: %w", err)
	}
	select {
	case err := <-fatal:
		return err
	default:
		return nil
	}
}

// reloadOnHangup reloads the broker's TLS certificate and auth keys on
// each SIGHUP until ctx ends; the returned channel closes when it has
// stopped listening. A bad certificate or key file keeps what is in force
// (ReloadTLS and ReloadKeys log it); the broker never stops on SIGHUP.
func reloadOnHangup(ctx context.Context, b *broker.Broker, authNone bool, log zerolog.Logger) <-chan struct{} {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer signal.Stop(hup)
		for {
			select {
			case <-hup:
				log.Info().Msg("SIGHUP: reloading the TLS certificate and the auth keys")
				_ = b.ReloadTLS() // it logs the outcome, and a failure keeps the certificate in force
				if authNone {
					log.Info().Msg("auth none: no auth keys to reload")
					continue
				}
				_ = b.ReloadKeys() // likewise
			case <-ctx.Done():
				return
			}
		}
	}()
	return done
}

// config resolves the effective configuration: defaults < --config file <
// FELIX_* environment < flags. The caller validates it.
func (o *brokerOpts) config() (config.Config, error) {
	cfg := config.Default()
	if o.configFile != "" {
		if err := config.LoadFile(o.configFile, &cfg); err != nil {
			return config.Config{}, err
		}
	}
	if err := config.LoadEnv(os.Environ(), &cfg); err != nil {
		return config.Config{}, err
	}
	o.knobs.Apply(&cfg)
	// The CLI-owned knobs: only flags given on the command line, so their
	// defaults do not undo the file or the environment.
	for name, dst := range map[string]*string{
		"listen": &cfg.Listen, "data-dir": &cfg.DataDir, "addr-file": &cfg.AddrFile, "log-level": &cfg.LogLevel,
	} {
		if o.flags.Changed(name) {
			*dst = o.flags.Lookup(name).Value.String()
		}
	}
	return cfg, nil
}

// validate is config.Validate plus the CLI-owned knobs it does not check.
func validate(cfg config.Config) error {
	var errs []error
	if _, _, err := net.SplitHostPort(cfg.Listen); err != nil || cfg.Listen == "" {
		// An empty listen would make QUIC bind every interface on a random port.
		errs = append(errs, fmt.Errorf("config: listen: want host:port, such as 127.0.0.1:5000, got %q", cfg.Listen))
	}
	if cfg.DataDir == "" {
		// An empty data dir would put the generated key pair in the working folder.
		errs = append(errs, errors.New("config: data_dir: must not be empty"))
	}
	return errors.Join(append(errs, cfg.Validate())...)
}

// newLogger logs to stderr: human-readable on a terminal, JSON otherwise.
func newLogger(format, level string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil {
		return zerolog.Logger{}, fmt.Errorf("--log-level: %w", err)
	}
	if format == "auto" {
		format = "json"
		if isTerminal(os.Stderr) {
			format = "console"
		}
	}
	zerolog.TimeFieldFormat = "2006-01-02T15:04:05.000Z07:00"
	var log zerolog.Logger
	switch format {
	case "json":
		log = zerolog.New(os.Stderr)
	case "console":
		// Colour only for a terminal: escape codes in a file or a pipe
		// are noise to whatever reads it.
		log = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05.000", NoColor: !isTerminal(os.Stderr)})
	default:
		return zerolog.Logger{}, fmt.Errorf("--log-format: want console, json or auto, got %q", format)
	}
	return log.Level(lvl).With().Timestamp().Logger(), nil
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
