package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/cluster"
)

// adminOpts are the flags of commands that talk to a broker's admin endpoint.
type adminOpts struct {
	addr    string
	token   string
	timeout time.Duration
	// contextName is --context; ctxToken the chosen context's token and
	// ctxFrom where it came from (applyContext).
	contextName, ctxToken, ctxFrom string
}

func (o *adminOpts) register(fs *pflag.FlagSet) {
	fs.StringVar(&o.addr, "admin", "127.0.0.1:5080", "the broker's admin endpoint (felix broker --admin)")
	registerToken(fs, &o.token)
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "give up on the admin endpoint after this long")
	registerContext(fs, &o.contextName)
}

// call sends one request to the admin endpoint and decodes its JSON answer.
func (o *adminOpts) call(ctx context.Context, method, path string, body, into any) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+o.addr+path, rd)
	if err != nil {
		return usagef("bad --admin %q: %v", o.addr, err)
	}
	if method != http.MethodGet {
		// The endpoint refuses a change without it, body or none (a drain
		// has none): it is what tells a browser's form post from a client.
		req.Header.Set("Content-Type", "application/json")
	}
	token, err := o.bearer()
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach the admin endpoint at %s: is `felix broker` running with --admin %s? (%v)", o.addr, o.addr, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("read admin answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return &adminRefusal{status: resp.StatusCode, err: o.refusal(resp, path, data)}
	}
	return json.Unmarshal(data, into)
}

// adminRefusal is an admin endpoint's non-2xx answer: its status, for
// callers that act on one (felix dev cluster on 404), and the message.
type adminRefusal struct {
	status int
	err    error
}

func (e *adminRefusal) Error() string { return e.err.Error() }
func (e *adminRefusal) Unwrap() error { return e.err }

// refusal says what a non-2xx answer means, from its JSON {"error"} when
// it has one.
func (o *adminOpts) refusal(resp *http.Response, path string, data []byte) error {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(data, &e) != nil || e.Error == "" {
		return fmt.Errorf("admin endpoint answered %s: %s", resp.Status, strings.TrimSpace(string(data)))
	}
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		return fmt.Errorf("the admin endpoint at %s refused %s: %s. This command sent %s. %s",
			o.addr, path, e.Error, tokenSource(o.token, o.ctxFrom), howToGetToken)
	case http.StatusForbidden:
		if strings.HasPrefix(e.Error, "forbidden:") {
			return fmt.Errorf("the admin endpoint at %s refused %s: %s; this command sent %s", o.addr, path, e.Error, tokenSource(o.token, o.ctxFrom))
		}
	}
	return errors.New(e.Error)
}

// bearer is the token to send: --token, $FELIX_TOKEN, else
// ./felix-data/admin.token when it exists, as the client commands choose.
func (o *adminOpts) bearer() (string, error) {
	if token, src := flagOrEnvToken(o.token); src != "" {
		return token, nil
	}
	if o.ctxFrom != "" {
		return o.ctxToken, nil
	}
	data, err := os.ReadFile(client.DefaultTokenFile)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("read the default token: %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}

type treeOpts struct {
	admin   adminOpts
	json    bool
	kind    string
	cluster bool
}

func newTreeCmd() *command {
	o := &treeOpts{}
	fs := newFlagSet("tree")
	o.admin.register(fs)
	fs.BoolVar(&o.json, "json", false, "print the actors as JSON (one object with an \"actors\" list)")
	fs.StringVar(&o.kind, "kind", "", "only actors of this kind: shard, feeder, lane, connection_writer, group, session, supervisor (none matching exits 1)")
	fs.BoolVar(&o.cluster, "cluster", false, "every cluster member's tree, gathered by the member at --admin, under a heading per member")
	c := &command{
		name:  "tree",
		short: "print a broker's supervision tree with live mailbox depths",
		long: `Prints the broker's actors as a tree: the supervisors, the stream shards, the
subscription feeders, the writer lanes and the connection writers, each with
its mailbox depth and bound, drops, restarts and what it serves.

With --cluster, the member at --admin gathers every member's tree and each
prints under its node id; a member that did not answer shows why.

Examples:
  felix tree
  felix tree --kind feeder --json
  felix tree --cluster --admin 127.0.0.1:7101`,
		flags: fs,
	}
	c.run = o.admin.withContext(fs, o.run)
	return c
}

func (o *treeOpts) run(ctx context.Context, args []string) error {
	if len(args) > 0 {
		return usagef("tree takes no arguments, got %q", args)
	}
	if o.cluster {
		return o.runCluster(ctx)
	}
	path := "/debug/actors"
	if o.kind != "" {
		path += "?kind=" + o.kind
	}
	var res struct {
		Actors []broker.ActorInfo `json:"actors"`
	}
	if err := o.admin.call(ctx, http.MethodGet, path, nil, &res); err != nil {
		return err
	}
	if o.json {
		if err := printJSON(os.Stdout, struct {
			Actors []broker.ActorInfo `json:"actors"`
		}{nonNil(res.Actors)}); err != nil {
			return err
		}
	} else {
		printTree(os.Stdout, res.Actors, o.kind != "")
	}
	if o.kind != "" && len(res.Actors) == 0 {
		return noKind(o.kind)
	}
	return nil
}

// noKind is tree --kind's error when no actor matched.
func noKind(kind string) error {
	return fmt.Errorf("no actor of kind %q: the kinds are shard, feeder, lane, connection_writer, group, session and supervisor (felix tree lists every actor)", kind)
}

// runCluster prints every member's tree. --kind filters here: the
// members' documents come whole.
func (o *treeOpts) runCluster(ctx context.Context) error {
	var trees cluster.Trees
	if err := o.admin.call(ctx, http.MethodGet, "/debug/cluster/actors", nil, &trees); err != nil {
		return err
	}
	for i, m := range trees.Members {
		if m.Error != "" || o.kind == "" {
			continue
		}
		filtered, err := filterKind(m.Actors, o.kind)
		if err != nil {
			return fmt.Errorf("the tree of %s: %w", m.NodeID, err)
		}
		trees.Members[i].Actors = filtered
	}
	if o.json {
		if err := printJSON(os.Stdout, trees); err != nil {
			return err
		}
	} else if err := printTrees(os.Stdout, trees, o.kind != ""); err != nil {
		return err
	}
	if o.kind != "" && !anyActor(trees) {
		return noKind(o.kind)
	}
	return nil
}

// anyActor says whether a member's tree lists an actor.
func anyActor(trees cluster.Trees) bool {
	for _, m := range trees.Members {
		var doc memberActors
		if m.Error == "" && json.Unmarshal(m.Actors, &doc) == nil && len(doc.Actors) > 0 {
			return true
		}
	}
	return false
}

// memberActors is a member's /debug/actors document.
type memberActors struct {
	Actors []broker.ActorInfo `json:"actors"`
}

func filterKind(doc json.RawMessage, kind string) (json.RawMessage, error) {
	var all memberActors
	if err := json.Unmarshal(doc, &all); err != nil {
		return nil, err
	}
	var some memberActors
	for _, a := range all.Actors {
		if a.Kind == kind {
			some.Actors = append(some.Actors, a)
		}
	}
	return json.Marshal(some)
}

// printTrees prints each member's tree under a "== NODE ==" heading, or
// why it is missing.
func printTrees(w io.Writer, trees cluster.Trees, flat bool) error {
	for i, m := range trees.Members {
		if i > 0 {
			fmt.Fprintln(w)
		}
		switch {
		case m.Down:
			fmt.Fprintf(w, "== %s: DOWN, last seen %s ==\n", m.NodeID, joinedAgo(m.LastSeen, time.Now()))
			continue
		case m.Error != "":
			fmt.Fprintf(w, "== %s: no tree: %s ==\n", m.NodeID, m.Error)
			continue
		}
		var doc memberActors
		if err := json.Unmarshal(m.Actors, &doc); err != nil {
			return fmt.Errorf("the tree of %s: %w", m.NodeID, err)
		}
		fmt.Fprintf(w, "== %s ==\n", m.NodeID)
		printTree(w, doc.Actors, flat)
	}
	return nil
}

// printTree indents each actor under its parent. With a kind filter the
// parents are absent, so everything prints flat.
func printTree(w io.Writer, list []broker.ActorInfo, flat bool) {
	depth := map[string]int{}
	for _, a := range list {
		d := 0
		if pd, ok := depth[a.Parent]; ok && !flat {
			d = pd + 1
		}
		depth[a.Path] = d
		name := a.Path
		if i := strings.LastIndexByte(name, '/'); i >= 0 && d > 0 {
			name = name[i+1:]
		}
		line := fmt.Sprintf("%s%s [%s] depth %d/%d", strings.Repeat("  ", d), name, a.Kind, a.MailboxDepth, a.Capacity)
		if a.Policy != "" {
			line += " " + a.Policy
		}
		if a.MailboxBytes > 0 {
			line += fmt.Sprintf(" %dB", a.MailboxBytes)
		}
		if a.Dropped+a.Evicted > 0 {
			line += fmt.Sprintf(" dropped %d evicted %d", a.Dropped, a.Evicted)
		}
		if a.Restarts > 0 {
			line += fmt.Sprintf(" restarts %d", a.Restarts)
		}
		if a.LastFailure != nil {
			line += fmt.Sprintf(" (last failure %s: %s)", a.LastFailure.At.Format(time.TimeOnly), a.LastFailure.Reason)
		}
		for _, k := range []string{"stream", "cache", "shard", "watch", "subscription", "conn", "lane", "remote"} {
			if v, ok := a.Labels[k]; ok {
				line += fmt.Sprintf(" %s=%s", k, v)
			}
		}
		fmt.Fprintln(w, line)
	}
}
