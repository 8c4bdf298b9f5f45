package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/getfelix/felix-go/admin"
	"github.com/getfelix/felix-go/auth"
)

// kafkaOpts are felix kafka's flags: the Kafka listener's SCRAM users,
// kept by the broker and changed through its admin endpoint, so that a
// running broker takes a new user at once.
type kafkaOpts struct {
	admin        adminOpts
	out          io.Writer
	tenant       string
	user         string
	passwordFile string
	mechanism    string
	iterations   int
	grants       []string
	json         bool
}

func newKafkaCmd() *command {
	o := &kafkaOpts{out: os.Stdout}
	fs := newFlagSet("kafka")
	o.admin.register(fs)
	fs.StringVar(&o.tenant, "tenant", "", "the user's tenant (ls: only this tenant's users)")
	fs.StringVar(&o.user, "user", "", "the user's name (letters, digits, '.', '_', '-')")
	fs.StringVar(&o.passwordFile, "password-file", "", "add: a file holding the password (its trailing newline dropped); - reads standard input")
	fs.StringVar(&o.mechanism, "mechanism", "scram-sha-512", "add: scram-sha-256 or scram-sha-512 (add twice for both)")
	fs.IntVar(&o.iterations, "iterations", admin.KafkaUserDefaultIterations, "add: the PBKDF2 iteration count, 4096 to 16384")
	fs.StringArrayVar(&o.grants, "grant", nil, "add: ACTION:NAMESPACE/STREAM, repeatable (at least one), as felix token create takes")
	fs.BoolVar(&o.json, "json", false, `ls: print {"users": [...]} as JSON`)
	c := &command{
		name:  "kafka",
		args:  "user add | user ls | user rm",
		short: "manage the Kafka listener's SCRAM users",
		long: `Manages the users a Kafka client logs in as with SASL/SCRAM-SHA-256 or
SCRAM-SHA-512, through the broker's admin endpoint (--admin). A Kafka client
names its user TENANT/USER.

  felix kafka user add --tenant T --user U --password-file F [--mechanism scram-sha-512] --grant ...
      adds the user's credential for the mechanism, or replaces the one it
      had. The salted credential is derived here, and only it (salt,
      iteration count, StoredKey, ServerKey) is sent and kept; the password
      never leaves this machine. The grants are what the user may do in its
      tenant, as a token's.
  felix kafka user ls [--tenant T] [--json]
      lists the users, their mechanisms, iteration counts and grants.
  felix kafka user rm --tenant T --user U
      removes every credential of the user. Its open connections go on;
      its next login is refused.

add and rm need a token granting node.manage, ls node.view (a token of a
key restricted to tenants: on its own tenant only). A cluster member keeps
no users and refuses.

Examples:
  felix kafka user add --tenant acme --user billing --password-file pw.txt --grant stream.publish:orders/* --grant stream.subscribe:orders/*
  felix kafka user ls --tenant acme
  felix kafka user rm --tenant acme --user billing`,
		flags: fs,
	}
	c.run = o.admin.withContext(fs, func(ctx context.Context, args []string) error { return o.run(ctx, fs.Changed, args) })
	return c
}

func (o *kafkaOpts) run(ctx context.Context, changed func(string) bool, args []string) error {
	if len(args) != 2 || args[0] != "user" {
		return usagef("kafka needs user add, user ls or user rm, got %q", args)
	}
	addOnly := []string{"password-file", "mechanism", "iterations", "grant"}
	if args[1] != "add" {
		for _, f := range addOnly {
			if changed(f) {
				return usagef("--%s is user add's", f)
			}
		}
	}
	if args[1] != "ls" && o.json {
		return usagef("--json is user ls's")
	}
	switch args[1] {
	case "add":
		return o.add(ctx)
	case "ls":
		if changed("user") {
			return usagef("user ls lists every user of --tenant; --user is add's and rm's")
		}
		return o.ls(ctx)
	case "rm":
		return o.rm(ctx)
	default:
		return usagef("kafka user needs add, ls or rm, got %q", args[1])
	}
}

func (o *kafkaOpts) add(ctx context.Context) error {
	if o.tenant == "" || o.user == "" || o.passwordFile == "" {
		return usagef("user add needs --tenant, --user and --password-file")
	}
	if len(o.grants) == 0 {
		return usagef("give at least one --grant ACTION:NAMESPACE/STREAM, e.g. --grant stream.subscribe:orders/*")
	}
	grants := make([]auth.Grant, len(o.grants))
	for i, s := range o.grants {
		g, err := auth.ParseGrant(s)
		if err != nil {
			return usagef("--grant: %v", err)
		}
		grants[i] = g
	}
	password, err := readPassword(o.passwordFile)
	if err != nil {
		return err
	}
	mechanism := strings.ToUpper(o.mechanism)
	u, err := admin.NewKafkaUser(o.tenant, o.user, mechanism, password, o.iterations, grants)
	if err != nil {
		return usagef("%v", err)
	}
	var res map[string]string
	if err := o.admin.call(ctx, http.MethodPost, "/debug/kafka/users?"+url.Values{"tenant": {o.tenant}}.Encode(), u, &res); err != nil {
		return err
	}
	fmt.Fprintf(o.out, "added %s credential of Kafka user %s/%s\n", mechanism, o.tenant, o.user)
	return nil
}

// readPassword reads the password file (standard input for "-"), without
// its trailing line ending.
func readPassword(path string) (string, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(io.LimitReader(os.Stdin, 64<<10))
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return "", fmt.Errorf("read the password: %w", err)
	}
	password := strings.TrimRight(string(data), "\r\n")
	if password == "" {
		return "", usagef("the password file %s is empty", path)
	}
	return password, nil
}

func (o *kafkaOpts) ls(ctx context.Context) error {
	path := "/debug/kafka/users"
	if o.tenant != "" {
		path += "?" + url.Values{"tenant": {o.tenant}}.Encode()
	}
	var res struct {
		Users []admin.KafkaUser `json:"users"`
	}
	if err := o.admin.call(ctx, http.MethodGet, path, nil, &res); err != nil {
		return err
	}
	if o.json {
		return printJSON(o.out, struct {
			Users []admin.KafkaUser `json:"users"`
		}{nonNil(res.Users)})
	}
	tw := tabwriter.NewWriter(o.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tUSER\tMECHANISM\tITERATIONS\tGRANTS")
	for _, u := range res.Users {
		grants := make([]string, len(u.Grants))
		for i, g := range u.Grants {
			grants[i] = g.String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", u.Tenant, u.User, u.Mechanism, u.Iterations, strings.Join(grants, " "))
	}
	return tw.Flush()
}

func (o *kafkaOpts) rm(ctx context.Context) error {
	if o.tenant == "" || o.user == "" {
		return usagef("user rm needs --tenant and --user")
	}
	var res map[string]string
	if err := o.admin.call(ctx, http.MethodDelete, "/debug/kafka/users?"+url.Values{"tenant": {o.tenant}, "user": {o.user}}.Encode(), nil, &res); err != nil {
		return err
	}
	fmt.Fprintf(o.out, "removed Kafka user %s/%s\n", o.tenant, o.user)
	return nil
}
