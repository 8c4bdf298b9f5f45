package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/pflag"

	"github.com/getfelix/felix-go/auth"
)

// A context is a named set of client settings (brokers, admin endpoint,
// CA, token or token file, tenant, namespace) kept in the user's config
// directory, so that commands need no --broker --ca --token each time.
// Every client and admin command takes the current context's settings
// (or --context NAME's, or $FELIX_CONTEXT's) for the flags not given:
// a flag always wins, and $FELIX_TOKEN wins over a context's token.

const (
	// contextEnv names a context for one shell, over the current one.
	contextEnv = "FELIX_CONTEXT"
	// contextsFile is the file under os.UserConfigDir()/felix.
	contextsFile = "contexts.json"
)

// felixContext is one context. Paths are absolute, so the context works
// from any folder.
type felixContext struct {
	Brokers   string `json:"brokers,omitempty"`
	Admin     string `json:"admin,omitempty"`
	CA        string `json:"ca,omitempty"`
	Insecure  bool   `json:"insecure,omitempty"`
	Token     string `json:"token,omitempty"`
	TokenFile string `json:"token_file,omitempty"`
	Tenant    string `json:"tenant,omitempty"`
	Namespace string `json:"namespace,omitempty"`
}

// contextStore is contexts.json.
type contextStore struct {
	Current  string                  `json:"current,omitempty"`
	Contexts map[string]felixContext `json:"contexts"`
}

// contextsPath is where the contexts live.
func contextsPath() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("find the config directory for felix contexts (set $HOME or $XDG_CONFIG_HOME): %w", err)
	}
	return filepath.Join(dir, "felix", contextsFile), nil
}

// loadContexts reads the store; a missing file is an empty store.
func loadContexts() (contextStore, string, error) {
	st := contextStore{Contexts: map[string]felixContext{}}
	path, err := contextsPath()
	if err != nil {
		return st, "", err
	}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return st, path, nil
	case err != nil:
		return st, path, fmt.Errorf("read the felix contexts: %w", err)
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, path, fmt.Errorf("the felix contexts in %s are not valid JSON (%v): fix the file or remove it", path, err)
	}
	if st.Contexts == nil {
		st.Contexts = map[string]felixContext{}
	}
	return st, path, nil
}

// save writes the store, readable by the user alone: it may hold tokens.
func (st contextStore) save(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("make %s for the felix contexts: %w", filepath.Dir(path), err)
	}
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("write the felix contexts: %w", err)
	}
	return os.Rename(tmp, path)
}

// chosenContext is the context a command uses: --context, else
// $FELIX_CONTEXT, else the current one; ok is false when there is none.
func chosenContext(flag string) (name string, c felixContext, ok bool, err error) {
	name = flag
	if name == "" {
		name = os.Getenv(contextEnv)
	}
	st, path, err := loadContexts()
	if err != nil {
		return "", c, false, err
	}
	if name == "" {
		name = st.Current
	}
	if name == "" {
		return "", c, false, nil
	}
	c, ok = st.Contexts[name]
	if !ok {
		from := "--context"
		if flag == "" {
			from = "$" + contextEnv
			if os.Getenv(contextEnv) == "" {
				from = "the current context in " + path
			}
		}
		return name, c, false, usagef("no felix context %q (named by %s): felix context ls lists them", name, from)
	}
	return name, c, true, nil
}

// contextToken is a context's token: its own, or its token file's.
func contextToken(name string, c felixContext) (token, from string, err error) {
	switch {
	case c.Token != "":
		return c.Token, "context " + name, nil
	case c.TokenFile != "":
		token, err := auth.ReadToken(c.TokenFile)
		if err != nil {
			return "", "", fmt.Errorf("context %s's token file: %w", name, err)
		}
		return token, fmt.Sprintf("context %s (its token file %s)", name, c.TokenFile), nil
	}
	return "", "", nil
}

func registerContext(fs *pflag.FlagSet, dst *string) {
	fs.StringVar(dst, "context", "", "take the settings not given as flags from this felix context (default $"+contextEnv+", else the current one; felix context ls)")
}

// applyContext fills the flags not given from the chosen context.
func (o *connOpts) applyContext(changed func(string) bool) error {
	name, c, ok, err := chosenContext(o.contextName)
	if err != nil || !ok {
		return err
	}
	set := func(flag string, dst *string, v string) {
		if v != "" && !changed(flag) {
			*dst = v
		}
	}
	set("broker", &o.broker, c.Brokers)
	set("tenant", &o.tenant, c.Tenant)
	set("namespace", &o.namespace, c.Namespace)
	if !changed("ca") && !changed("insecure") {
		o.caFile, o.insecure = c.CA, c.Insecure
	}
	o.ctxToken, o.ctxFrom, err = contextToken(name, c)
	return err
}

// applyContext fills the admin flags not given from the chosen context.
func (o *adminOpts) applyContext(changed func(string) bool) error {
	name, c, ok, err := chosenContext(o.contextName)
	if err != nil || !ok {
		return err
	}
	if c.Admin != "" && !changed("admin") {
		o.addr = c.Admin
	}
	o.ctxToken, o.ctxFrom, err = contextToken(name, c)
	return err
}

// withContext runs run with the admin flags' context applied.
func (o *adminOpts) withContext(fs *pflag.FlagSet, run func(context.Context, []string) error) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		if err := o.applyContext(fs.Changed); err != nil {
			return err
		}
		return run(ctx, args)
	}
}

type contextOpts struct {
	flags     *pflag.FlagSet
	c         felixContext
	json      bool
	noCurrent bool
}

func newContextCmd() *command {
	fs := newFlagSet("context")
	o := &contextOpts{flags: fs}
	fs.StringVar(&o.c.Brokers, "broker", "", "add: the broker address, or a comma-separated list of a cluster's brokers")
	fs.StringVar(&o.c.Admin, "admin", "", "add: the admin endpoint (felix tree, cluster, chaos)")
	fs.StringVar(&o.c.CA, "ca", "", "add: trust the broker certificate(s) in this PEM file (kept as an absolute path)")
	fs.BoolVar(&o.c.Insecure, "insecure", false, "add: do not verify the broker's certificate")
	fs.StringVar(&o.c.Token, "token", "", "add: the token, kept in the context file (prefer --token-file)")
	fs.StringVar(&o.c.TokenFile, "token-file", "", "add: read the token from this file at each use (kept as an absolute path)")
	fs.StringVar(&o.c.Tenant, "tenant", "", "add: the tenant (default: default)")
	fs.StringVar(&o.c.Namespace, "namespace", "", "add: the namespace (default: default)")
	fs.BoolVar(&o.noCurrent, "no-use", false, "add: do not make it the current context")
	fs.BoolVar(&o.json, "json", false, "ls: print the contexts as a JSON array")
	c := &command{
		name:  "context",
		args:  "add NAME [flags] | use NAME | ls | rm NAME",
		short: "save broker addresses, CA and token under a name, for every command",
		long: `Keeps named client settings in the user's config directory
(` + "`os.UserConfigDir()`" + `/felix/contexts.json: ~/.config/felix on Linux, readable by the
user alone). Every client and admin command takes the settings it was not
given as flags from the current context, from $FELIX_CONTEXT's, or from
--context NAME's; a flag always wins, and $FELIX_TOKEN wins over a
context's token.

  felix context add NAME [--broker A,B] [--admin ADDR] [--ca FILE | --insecure]
                         [--token-file FILE | --token T] [--tenant T] [--namespace NS] [--no-use]
      saves NAME (replacing one of that name) and makes it the current
      context unless --no-use.
  felix context use NAME     makes NAME the current context
  felix context ls [--json]  lists the contexts; * marks the current one
  felix context rm NAME      removes NAME

Example, for felix dev cluster's members:
  felix context add dev --broker 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003 \
      --admin 127.0.0.1:7101 --ca felix-cluster/cert.pem --token-file felix-cluster/admin.token
  felix pub --stream demo hello`,
		flags: fs,
	}
	c.run = o.run
	return c
}

func (o *contextOpts) run(_ context.Context, args []string) error {
	if len(args) == 0 {
		return usagef("context needs add NAME, use NAME, ls or rm NAME")
	}
	verb, rest := args[0], args[1:]
	switch verb {
	case "add", "use", "ls", "rm":
	default:
		return usagef("context needs add, use, ls or rm, got %q", verb)
	}
	if verb != "add" {
		var given []string
		o.flags.Visit(func(f *pflag.Flag) {
			if f.Name != "json" {
				given = append(given, "--"+f.Name)
			}
		})
		if len(given) > 0 {
			return usagef("%s are add's flags", strings.Join(given, ", "))
		}
	}
	if verb == "ls" {
		if len(rest) != 0 {
			return usagef("ls takes no arguments, got %q", rest)
		}
		return o.ls()
	}
	if len(rest) != 1 {
		return usagef("context %s needs one NAME, got %q", verb, rest)
	}
	name := rest[0]
	if err := validContextName(name); err != nil {
		return err
	}
	st, path, err := loadContexts()
	if err != nil {
		return err
	}
	switch verb {
	case "add":
		return o.add(&st, path, name)
	case "use":
		return useContext(&st, path, name)
	default:
		return removeContext(&st, path, name)
	}
}

// add saves the flags as context name, the current one unless
// --no-current.
func (o *contextOpts) add(st *contextStore, path, name string) error {
	if err := o.absolute(); err != nil {
		return err
	}
	_, replaced := st.Contexts[name]
	st.Contexts[name] = o.c
	if !o.noCurrent {
		st.Current = name
	}
	if err := st.save(path); err != nil {
		return err
	}
	what := "added"
	if replaced {
		what = "replaced"
	}
	fmt.Printf("%s context %s in %s", what, name, path)
	if st.Current == name {
		fmt.Print("; it is the current context")
	}
	fmt.Println()
	return nil
}

// useContext makes name the current context.
func useContext(st *contextStore, path, name string) error {
	if _, ok := st.Contexts[name]; !ok {
		return fmt.Errorf("no felix context %q: felix context ls lists them", name)
	}
	st.Current = name
	if err := st.save(path); err != nil {
		return err
	}
	fmt.Printf("the current context is %s\n", name)
	return nil
}

// removeContext removes context name, and with it the current one if it
// was that.
func removeContext(st *contextStore, path, name string) error {
	if _, ok := st.Contexts[name]; !ok {
		return fmt.Errorf("no felix context %q: felix context ls lists them", name)
	}
	delete(st.Contexts, name)
	if st.Current == name {
		st.Current = ""
	}
	if err := st.save(path); err != nil {
		return err
	}
	fmt.Printf("removed context %s\n", name)
	return nil
}

// absolute checks add's flags and makes its paths absolute, so the
// context works from another folder.
func (o *contextOpts) absolute() error {
	switch {
	case o.c.CA != "" && o.c.Insecure:
		return usagef("--ca and --insecure contradict each other: give one")
	case o.c.Token != "" && o.c.TokenFile != "":
		return usagef("--token and --token-file both give the token: give one")
	}
	for _, p := range []*string{&o.c.CA, &o.c.TokenFile} {
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		if !fileExists(abs) {
			return fmt.Errorf("%s does not exist: give the path of an existing file", abs)
		}
		*p = abs
	}
	return nil
}

// contextRow is a context as ls --json prints it.
type contextRow struct {
	Name    string `json:"name"`
	Current bool   `json:"current"`
	felixContext
}

func (o *contextOpts) ls() error {
	st, path, err := loadContexts()
	if err != nil {
		return err
	}
	names := make([]string, 0, len(st.Contexts))
	for n := range st.Contexts {
		names = append(names, n)
	}
	slices.Sort(names)
	rows := make([]contextRow, len(names))
	for i, n := range names {
		rows[i] = contextRow{Name: n, Current: n == st.Current, felixContext: st.Contexts[n]}
		rows[i].Token = redact(rows[i].Token)
	}
	if o.json {
		return printJSON(os.Stdout, rows)
	}
	if len(rows) == 0 {
		fmt.Printf("no contexts (in %s): felix context add NAME --broker ... makes one\n", path)
		return nil
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "\tNAME\tBROKERS\tADMIN\tCA\tTOKEN\tTENANT\tNAMESPACE")
	for _, r := range rows {
		mark := ""
		if r.Current {
			mark = "*"
		}
		token := r.Token
		if r.TokenFile != "" {
			token = r.TokenFile
		}
		ca := r.CA
		if r.Insecure {
			ca = "(insecure)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", mark, r.Name, orDash(r.Brokers), orDash(r.Admin), orDash(ca), orDash(token), orDash(r.Tenant), orDash(r.Namespace))
	}
	return w.Flush()
}

// redact shows that a token is there without showing it.
func redact(token string) string {
	if token == "" {
		return ""
	}
	return "(set)"
}

func validContextName(name string) error {
	if name == "" || strings.ContainsAny(name, "/\\ \t\n") {
		return usagef("a context name is a word without slashes or spaces, got %q", name)
	}
	return nil
}
