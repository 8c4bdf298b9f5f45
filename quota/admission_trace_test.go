package quota

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/getfelix/felix-go/wire"
)

// TestAdmissionTrace runs the scripts in testdata/: the pre-auth and
// authenticated connection pools, and the failed-authentication limiter,
// on a logical clock. Regenerate with -rewrite, and commit only changes
// you understand.
//
//	connections preauth=N preauth-per-ip=N max=N per-ip=N per-tenant=N   a new Connections
//	preauth name ip                                           AcquirePreAuth
//	auth name ip [tenant=T]                                   Acquire (tenant "t" unless named)
//	release name                                              the named release
//	failures burst=N interval=D addresses=N                   a new AuthFailures
//	fail ip / allow ip                                        Failed / Allow at the clock
//	advance D                                                 moves the clock
//	state                                                     what each holds
func TestAdmissionTrace(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		tr := &admissionTrace{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
		datadriven.RunTest(t, path, tr.run)
	})
}

type admissionTrace struct {
	conns     *Connections
	failures  *AuthFailures
	releases  map[string]func()
	displaced []string
	now       time.Time
}

func (tr *admissionTrace) run(t *testing.T, d *datadriven.TestData) string {
	switch d.Cmd {
	case "connections":
		var cfg Config
		d.MaybeScanArgs(t, "preauth", &cfg.MaxPreAuthConnections)
		d.MaybeScanArgs(t, "preauth-per-ip", &cfg.MaxPreAuthConnectionsPerIP)
		d.MaybeScanArgs(t, "max", &cfg.MaxConnections)
		d.MaybeScanArgs(t, "per-ip", &cfg.MaxConnectionsPerIP)
		d.MaybeScanArgs(t, "per-tenant", &cfg.MaxTenantConnections)
		tr.conns = NewConnections(cfg, WithOnRefused(func(tenant, reason string) {
			if tenant != "" {
				reason += " of tenant " + tenant
			}
			tr.displaced = append(tr.displaced, "counted "+reason)
		}))
		tr.releases = make(map[string]func())
		return ""
	case "preauth", "auth":
		name, ip := d.CmdArgs[0].Key, netip.MustParseAddr(d.CmdArgs[1].Key)
		var release func()
		var err error
		if d.Cmd == "preauth" {
			release, err = tr.conns.AcquirePreAuth(ip, func() { tr.displaced = append(tr.displaced, "displaced "+name) })
		} else {
			tenant := "t"
			d.MaybeScanArgs(t, "tenant", &tenant)
			release, err = tr.conns.Acquire(ip, tenant)
		}
		out := tr.drainDisplaced()
		if err != nil {
			return out + refusal(err)
		}
		tr.releases[name] = release
		return out + "admitted"
	case "release":
		tr.releases[d.CmdArgs[0].Key]()
		return ""
	case "failures":
		var cfg Config
		d.ScanArgs(t, "burst", &cfg.AuthFailureBurst)
		var interval string
		if d.MaybeScanArgs(t, "interval", &interval) {
			cfg.AuthFailureInterval = mustDuration(t, interval)
		}
		d.MaybeScanArgs(t, "addresses", &cfg.AuthFailureMaxAddresses)
		tr.failures = NewAuthFailures(cfg)
		return ""
	case "fail":
		tr.failures.Failed(netip.MustParseAddr(d.CmdArgs[0].Key), tr.now)
		return ""
	case "allow":
		if err := tr.failures.Allow(netip.MustParseAddr(d.CmdArgs[0].Key), tr.now); err != nil {
			return refusal(err)
		}
		return "allowed"
	case "advance":
		tr.now = tr.now.Add(mustDuration(t, d.CmdArgs[0].Key))
		return ""
	case "state":
		return tr.state()
	}
	t.Fatalf("unknown command %q", d.Cmd)
	return ""
}

func (tr *admissionTrace) drainDisplaced() string {
	out := ""
	for _, l := range tr.displaced {
		out += l + "\n"
	}
	tr.displaced = nil
	return out
}

func (tr *admissionTrace) state() string {
	var b strings.Builder
	if tr.conns != nil {
		pre, preAddrs := tr.conns.PreAuth()
		conns, addrs, tenants := tr.conns.Open()
		fmt.Fprintf(&b, "preauth %d from %d addresses; authenticated %d from %d addresses of %d tenants\n", pre, preAddrs, conns, addrs, tenants)
	}
	if tr.failures != nil {
		a := tr.failures
		a.mu.Lock()
		var rows []string
		for el := a.mu.recent.Front(); el != nil; el = el.Next() {
			f := el.Value.(*failedAddr)
			rows = append(rows, fmt.Sprintf("%s %.2f", f.key, f.tokens))
		}
		a.mu.Unlock()
		if len(rows) == 0 {
			rows = []string{"empty"}
		}
		fmt.Fprintf(&b, "failures table (least recent first): %s\n", strings.Join(rows, ", "))
	}
	return b.String()
}

// refusal renders a quota error: its code, retry class, message, and the
// Refusal's reason and wait.
func refusal(err error) string {
	var we *wire.Error
	var r *Refusal
	if !errors.As(err, &we) || !errors.As(err, &r) {
		return "unexpected error: " + err.Error()
	}
	out := fmt.Sprintf("refused %s (retry class %d) reason=%s limit=%d: %s", we.Code, we.Retry, r.Reason, r.Limit, we.Message)
	if r.RetryAfter > 0 {
		out += fmt.Sprintf(" [retry after %s]", r.RetryAfter)
	}
	return out
}

func mustDuration(t *testing.T, s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
