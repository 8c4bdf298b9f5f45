package broker

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/lanes"
)

// SetAdminIdleTimeout shortens the admin endpoint's keep-alive idle timeout
// for brokers started after it; the returned func restores it.
func SetAdminIdleTimeout(d time.Duration) (restore func()) {
	old := adminIdleTimeout
	adminIdleTimeout = d
	return func() { adminIdleTimeout = old }
}

// EgressShares sums, over every live connection, how many subscriptions
// its egress budget is divided among. Each session answers in turn, so
// everything it was told before the call is counted.
func (b *Broker) EgressShares() int64 {
	var n int64
	for _, e := range b.dir.List() {
		if e.Kind != actors.KindSession {
			continue
		}
		res, err := b.system.Root.RequestFuture(e.PID, &getWriter{}, time.Second).Result()
		if w, ok := res.(*lanes.WriterRef); ok && err == nil {
			n += w.Budget.Subscriptions()
		}
	}
	return n
}

// AdminToken is the token the broker wrote to its data directory (full
// rights on tenant default), or "" under auth none.
func (b *Broker) AdminToken() string {
	data, err := os.ReadFile(filepath.Join(b.cfg.DataDir, auth.AdminTokenFile))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}
