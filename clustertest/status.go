package clustertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getfelix/felix-go/cluster"
)

// adminTimeout bounds one admin request; a member that takes longer is
// stalled (or frozen), which the caller wants to hear about, not wait on.
const adminTimeout = 5 * time.Second

// Status is m's view of the cluster (GET /debug/cluster). The test fails
// when m does not answer with one.
func (c *Cluster) Status(t testing.TB, m *Member) cluster.Status {
	t.Helper()
	var st cluster.Status
	if err := c.admin(m, http.MethodGet, "/debug/cluster", &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TryStatus is Status that returns the error rather than failing the
// test, for a caller polling a member that may be too loaded to answer
// within the admin timeout.
func (c *Cluster) TryStatus(m *Member) (cluster.Status, error) {
	var st cluster.Status
	err := c.admin(m, http.MethodGet, "/debug/cluster", &st)
	return st, err
}

// Trees is every member's supervision tree as m gathers them (GET
// /debug/cluster/actors).
func (c *Cluster) Trees(t testing.TB, m *Member) cluster.Trees {
	t.Helper()
	var trees cluster.Trees
	if err := c.admin(m, http.MethodGet, "/debug/cluster/actors", &trees); err != nil {
		t.Fatal(err)
	}
	return trees
}

// Drain asks m to have the member nodeID hand its in-memory shards to the
// others (POST /debug/cluster/drain); it returns once the request is
// accepted, not once the shards have moved.
func (c *Cluster) Drain(t testing.TB, m *Member, nodeID string) {
	t.Helper()
	if err := c.admin(m, http.MethodPost, "/debug/cluster/drain?node="+url.QueryEscape(nodeID), nil); err != nil {
		t.Fatal(err)
	}
}

// WaitReady waits until every live member (running, not frozen) says it is
// Ready and lists n members up (members it saw go are listed down), polling each every 100 ms for up to 30 s; the
// test fails naming each member that is not.
func (c *Cluster) WaitReady(t testing.TB, n int) {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		waiting := c.notReady(n)
		if len(waiting) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("clustertest: not ready with %d members after %s:\n  %s", n, readyTimeout, strings.Join(waiting, "\n  "))
		}
		<-tick.C
	}
}

// notReady says, for each live member not yet ready with n members, what
// it answered.
func (c *Cluster) notReady(n int) []string {
	var waiting []string
	live := 0
	for _, m := range c.members {
		if !m.live() {
			continue
		}
		live++
		var st cluster.Status
		if err := c.admin(m, http.MethodGet, "/debug/cluster", &st); err != nil {
			waiting = append(waiting, err.Error())
			continue
		}
		if !st.Ready || len(st.Live()) != n {
			waiting = append(waiting, fmt.Sprintf("%s: ready %t, members %v, want ready with %d", m.NodeID, st.Ready, memberIDs(st), n))
		}
	}
	if live == 0 {
		waiting = append(waiting, "no member is running and unfrozen: Restart or Thaw one")
	}
	return waiting
}

func memberIDs(st cluster.Status) []string {
	ids := make([]string, len(st.Members))
	for i, ms := range st.Members {
		ids[i] = ms.NodeID
	}
	slices.Sort(ids)
	return ids
}

// admin sends one request with Token to m's admin endpoint and decodes a
// 2xx answer into into (when not nil).
func (c *Cluster) admin(m *Member, method, path string, into any) error {
	return c.adminBody(m, method, path, nil, into)
}

// adminBody is admin with a JSON body (none when body is nil).
func (c *Cluster) adminBody(m *Member, method, path string, body, into any) error {
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+m.Admin+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if method != http.MethodGet {
		// The admin endpoint refuses a change without it, body or none.
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %s %s: %w", m.NodeID, method, path, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("%s: %s %s: read the answer: %w", m.NodeID, method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s: %s %s answered %s: %s", m.NodeID, method, path, resp.Status, strings.TrimSpace(string(answer)))
	}
	if into == nil {
		return nil
	}
	if err := json.Unmarshal(answer, into); err != nil {
		return fmt.Errorf("%s: %s %s: decode %q: %w", m.NodeID, method, path, answer, err)
	}
	return nil
}

// ChaosKill crashes (mode panic) or stops (mode stop) the actor at path on
// m through its chaos route (POST /debug/chaos/kill): the members must run
// with --chaos (Options.ExtraArgs).
func (c *Cluster) ChaosKill(t testing.TB, m *Member, path, mode string) {
	t.Helper()
	if err := c.adminBody(m, http.MethodPost, "/debug/chaos/kill", map[string]string{"path": path, "mode": mode}, nil); err != nil {
		t.Fatal(err)
	}
}

// FailDisk makes m's durable logs' disk fail every write (or, with fail
// false, work again) through its chaos route: the members must run with
// --chaos (Options.ExtraArgs).
func (c *Cluster) FailDisk(t testing.TB, m *Member, fail bool) {
	t.Helper()
	if err := c.adminBody(m, http.MethodPost, "/debug/chaos/disk", map[string]bool{"fail": fail}, nil); err != nil {
		t.Fatal(err)
	}
}

// Metric reads one sample of m's /metrics: the value of the line whose
// name and labels are exactly series (e.g. `felix_replica_failures_total`),
// or 0 when there is none.
func (c *Cluster) Metric(t testing.TB, m *Member, series string) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+m.Admin+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		t.Fatalf("%s: /metrics: %v", m.NodeID, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		t.Fatalf("%s: /metrics: %v", m.NodeID, err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: metric %s: %v", m.NodeID, series, err)
			}
			return f
		}
	}
	return 0
}
