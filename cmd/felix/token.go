package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/config"
)

type tokenOpts struct {
	tenant   string
	subject  string
	grants   []string
	ttl      time.Duration
	dataDir  string
	audience string
	json     bool
}

func newTokenCmd() *command {
	o := &tokenOpts{}
	fs := newFlagSet("token")
	fs.StringVar(&o.tenant, "tenant", "", "the tenant the token is for (required)")
	fs.StringArrayVar(&o.grants, "grant", nil, "ACTION:NAMESPACE/STREAM, repeatable (at least one); '*' matches any run of name characters within a segment; node.view and node.manage take '*'")
	fs.DurationVar(&o.ttl, "ttl", time.Hour, "how long the token is valid")
	fs.StringVar(&o.dataDir, "data-dir", config.Default().DataDir, "the broker's data directory, which holds its signing key")
	fs.StringVar(&o.audience, "audience", auth.DefaultAudience, "the audience (aud) the broker expects")
	fs.StringVar(&o.subject, "subject", "", "who the token is for (sub), for the broker's logs")
	fs.BoolVar(&o.json, "json", false, `print {"token","tenant","grants","expires"} as JSON`)
	c := &command{
		name:  "token",
		args:  "create",
		short: "mint a token with the broker's local signing key",
		long: `Mints a token signed with the key the broker keeps in its data directory
(auth_signing_key.pem, made on its first start) and prints it on stdout.
Clients pass it with --token or FELIX_TOKEN.

  felix token create --tenant T --grant stream.publish:NS/STREAM --grant stream.subscribe:NS/* [--ttl 1h]

Actions: stream.publish, stream.subscribe (also range reads), stream.manage,
group.consume, group.manage, cache.read, cache.write, cache.manage,
node.view, node.manage.`,
		flags: fs,
	}
	c.run = o.run
	return c
}

func (o *tokenOpts) run(_ context.Context, args []string) error {
	if len(args) != 1 || args[0] != "create" {
		return usagef("token needs create; got %q", args)
	}
	if o.tenant == "" {
		return usagef("--tenant is required")
	}
	if len(o.grants) == 0 {
		return usagef("give at least one --grant ACTION:NAMESPACE/STREAM, e.g. --grant stream.subscribe:orders/*")
	}
	if o.ttl < time.Second {
		return usagef("--ttl must be at least 1s, got %s", o.ttl)
	}
	if o.audience == "" {
		return usagef("--audience must not be empty")
	}
	grants := make([]auth.Grant, len(o.grants))
	for i, s := range o.grants {
		g, err := auth.ParseGrant(s)
		if err != nil {
			return usagef("--grant: %v", err)
		}
		grants[i] = g
	}
	signer, err := auth.LocalSigner(o.dataDir)
	if err != nil {
		return err
	}
	token, expires, err := signer.Mint(auth.Claims{
		Tenant: o.tenant, Subject: o.subject, Grants: grants, Audience: []string{o.audience},
	}, o.ttl)
	if err != nil {
		return usagef("%v", err) // the key loaded, so what is left is the flags' (the tenant name)
	}
	if o.json {
		return json.NewEncoder(os.Stdout).Encode(struct {
			Token   string       `json:"token"`
			Tenant  string       `json:"tenant"`
			Grants  []auth.Grant `json:"grants"`
			Expires string       `json:"expires"`
		}{token, o.tenant, grants, expires.UTC().Format(time.RFC3339)})
	}
	fmt.Println(token)
	fmt.Fprintf(os.Stderr, "token for tenant %s, %d grants, expires %s\n", o.tenant, len(grants), expires.UTC().Format(time.RFC3339))
	return nil
}
