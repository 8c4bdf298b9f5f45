package broker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/config"
	"github.com/getfelix/felix-go/lanes"
	"github.com/getfelix/felix-go/sessions"
)

// EgressShares sums, over every live connection, how many subscriptions
// its egress budget is divided among. Each session answers in turn, so
// everything it was told before the call is counted.
func (b *Broker) EgressShares() int64 {
	var n int64
	for _, e := range b.dir.List() {
		if e.Kind != actors.KindSession {
			continue
		}
		if w, err := actors.Request[*lanes.WriterRef](context.Background(), b.system.Root, e.PID, &sessions.GetWriter{}, time.Second); err == nil {
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

// Config is the configuration b was made with.
func (b *Broker) Config() config.Config { return b.cfg }
