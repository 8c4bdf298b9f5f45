// Command felix runs a Felix broker and talks to one:
//
//	felix broker [--listen 127.0.0.1:5000] [--data-dir ./felix-data] [--config FILE] ...
//	felix pub --stream S [MESSAGE ...]
//	felix sub --stream S [--count N] [--json]
//	felix version
//
// Exit codes: 0 success (including a clean stop on SIGINT or SIGTERM of a
// command that runs until stopped), 1 a runtime error, or a command cut
// short (a signal, --timeout) before it did what it was asked, 2 a usage
// error: a bad flag or argument, or a configuration the broker refuses,
// found before anything ran.
//
// Each command keeps its flags in a pflag FlagSet (so the broker's knob
// flags can be listed in their own help section) and is mounted as a cobra
// command.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// command is one subcommand: its flags, its help text and what it runs.
type command struct {
	name  string
	args  string // the synopsis after "[flags]", e.g. "[MESSAGE ...]"
	short string // one line for the command list
	long  string // the help text's body, after the synopsis
	// flags is what Parse reads; sections split its help into headed groups
	// (the broker's knobs are many, and read better apart from its own flags).
	flags    *pflag.FlagSet
	sections []flagSection
	run      func(ctx context.Context, args []string) error
}

type flagSection struct {
	title string
	flags *pflag.FlagSet
}

// usageError is a mistake in how felix was invoked: exit 2, with a pointer
// to the help.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

func commands() []*command {
	return []*command{newBrokerCmd(), newPubCmd(), newSubCmd(), newReadCmd(), newStreamCmd(), newCacheCmd(), newCounterCmd(), newGroupCmd(), newConsumeCmd(), newTreeCmd(), newClusterCmd(), newDevCmd(), newChaosCmd(), newLogCmd(), newBenchCmd(), newTokenCmd(), newKafkaCmd(), newContextCmd(), newVersionCmd()}
}

func main() {
	os.Exit(run(os.Args[1:]))
}

// run executes one felix command line and returns the exit code. Each
// command is a cobra command built from its flag set; cobra parses (with
// pflag, as ever), dispatches and prints help, and felix keeps its own error
// form and exit codes.
func run(argv []string) int {
	cmds := commands()
	root := &cobra.Command{
		Use:           "felix",
		Short:         "felix: a pub/sub broker over QUIC",
		SilenceErrors: true,
		SilenceUsage:  true,
		Version:       version(),
		// A bare "felix" is a usage error: say what the commands are.
		RunE: func(cc *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q", args[0])
			}
			printRootUsage(os.Stderr, cmds)
			return usageError{errors.New("no command given")}
		},
	}
	root.SetVersionTemplate("felix {{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cobraHelp := root.HelpFunc()
	root.SetHelpFunc(func(cc *cobra.Command, args []string) {
		for _, c := range cmds {
			if c.name == cc.Name() {
				printUsage(os.Stdout, c)
				return
			}
		}
		if cc != root {
			cobraHelp(cc, args) // cobra's own commands: completion and its shells
			return
		}
		printRootUsage(os.Stdout, cmds)
	})
	failed := (*command)(nil)
	for _, c := range cmds {
		cc := &cobra.Command{
			Use:   c.name,
			Short: c.short,
			Long:  c.long,
			RunE: func(cc *cobra.Command, args []string) error {
				failed = c
				return c.run(cc.Context(), args)
			},
		}
		cc.Flags().AddFlagSet(c.flags)
		root.AddCommand(cc)
	}
	root.SetArgs(argv)

	// The first SIGINT or SIGTERM cancels ctx and the command winds down
	// cleanly; a command that may take a while to stop re-arms the default
	// handling (see stopOnSignal) so a second signal kills it.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := root.ExecuteContext(ctx); err != nil {
		if failed == nil {
			failed = &command{name: "<command>"}
			if cc, _, ferr := root.Find(argv); ferr == nil && cc != root {
				failed.name = cc.Name()
			} else if len(argv) == 0 || strings.HasPrefix(argv[0], "-") {
				failed.name = ""
			}
			if !errors.As(err, new(usageError)) {
				err = usageError{err} // cobra's own errors are all about the command line
			}
		}
		return fail(failed, err)
	}
	return 0
}

// fail prints err as "felix: <message>", one line per joined error, and
// returns its exit code.
func fail(cmd *command, err error) int {
	for line := range strings.Lines(err.Error()) {
		fmt.Fprintf(os.Stderr, "felix: %s\n", strings.TrimRight(line, "\n"))
	}
	if errors.As(err, new(usageError)) {
		fmt.Fprintf(os.Stderr, "Run '%s --help' for usage.\n", strings.TrimSpace("felix "+cmd.name))
		return 2
	}
	return 1
}

// stopOnSignal restores the default SIGINT and SIGTERM handling once ctx
// is done, so a second signal ends a shutdown that hangs.
func stopOnSignal() {
	signal.Reset(os.Interrupt, syscall.SIGTERM)
}

func printRootUsage(w io.Writer, cmds []*command) {
	fmt.Fprint(w, "felix: a pub/sub broker over QUIC\n\nUsage:\n  felix <command> [flags]\n\nCommands:\n")
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.short)
	}
	// cobra adds completion itself; it is listed here with the others.
	fmt.Fprintf(w, "  %-11s %s\n", "completion", "print a shell completion script: felix completion bash|zsh|fish|powershell")
	fmt.Fprint(w, "\nRun 'felix <command> --help' for a command's flags.\n")
}

func printUsage(w io.Writer, c *command) {
	fmt.Fprintf(w, "Usage:\n  felix %s [flags]", c.name)
	if c.args != "" {
		fmt.Fprintf(w, " %s", c.args)
	}
	fmt.Fprintf(w, "\n\n%s\n", strings.TrimSpace(c.long))
	sections := c.sections
	if sections == nil {
		sections = []flagSection{{"Flags", c.flags}}
	}
	for _, s := range sections {
		fmt.Fprintf(w, "\n%s:\n%s", s.title, s.flags.FlagUsages())
	}
}

// newFlagSet returns a FlagSet that reports errors to its caller and lists
// flags in the order they were added, most useful first.
func newFlagSet(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SortFlags = false
	return fs
}

func newVersionCmd() *command {
	c := &command{
		name:  "version",
		short: "print felix's version",
		long:  "Prints the version of the felix module this binary was built from (\"devel\" for a source build), the commit and the commit's time the Go toolchain stamped into the build (\"unknown\" when it stamped none: go run, or a tree without .git), and the Go version.",
		flags: newFlagSet("version"),
	}
	c.run = func(_ context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("version takes no arguments, got %q", args)
		}
		fmt.Println("felix " + version())
		return nil
	}
	return c
}

// version is the main module's version, as `go install ...@v1.2.3` records
// it, with the commit and its time the Go toolchain stamps into a build
// from a VCS checkout (vcs.revision, vcs.time).
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		info = nil
	}
	return versionOf(info)
}

// versionOf formats info as "devel commit 0123456789ab (modified) committed
// 2026-12-01T21:00:00Z go1.26.0": vcs.time is the commit's time, which
// names the build better than the clock of the machine that ran it (a
// rebuild of one commit prints the same). What the build did not stamp
// (go run, a tree without .git, -buildvcs=false) reads "unknown", never a
// guess.
func versionOf(info *debug.BuildInfo) string {
	if info == nil {
		return "devel commit unknown committed unknown"
	}
	v := info.Main.Version
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	rev, when, modified := "unknown", "unknown", ""
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value[:min(len(s.Value), 12)]
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = " (modified)"
			}
		}
	}
	return fmt.Sprintf("%s commit %s%s committed %s %s", v, rev, modified, when, info.GoVersion)
}
