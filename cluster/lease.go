package cluster

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// leaseMargin is how long before etcd could expire the lease the member
// stops acknowledging. etcd expires it no sooner than TTL after it took the
// last renewal, which was after the member sent it; the member counts from
// the send, so its deadline is already early, and the margin covers an
// answer that was checked just before the deadline and written after it.
const leaseMargin = 500 * time.Millisecond

// renew keeps the lease alive, every third of the TTL, and moves the
// acknowledgement deadline after each renewal etcd confirms. It closes lost
// when etcd says the lease is gone (it expired while the member was cut off
// or frozen): every shard is lost then, and the member joins again.
func (n *Node) renew(ctx context.Context, id clientv3.LeaseID, lost chan<- struct{}) {
	every := n.cfg.LeaseTTL / 3
	warned := false
	for {
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		sent := n.mono()
		rctx, cancel := context.WithTimeout(ctx, every)
		res, err := n.etcd.KeepAliveOnce(rctx, id)
		cancel()
		switch {
		case err == nil:
			n.validUntil.Store(sent + res.TTL*int64(time.Second) - int64(leaseMargin))
			if warned {
				n.log.Info().Msg("lease renewed again")
				warned = false
			}
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			close(lost)
			return
		case ctx.Err() != nil:
			return
		case !warned:
			left := time.Duration(n.validUntil.Load() - n.mono())
			n.log.Warn().Err(err).Dur("acknowledging_for", max(0, left)).Msg("cannot renew the lease; this member stops acknowledging for its shards when it runs out")
			warned = true
		}
	}
}

// leaseValid reports whether lease is the member's current one and etcd
// cannot have expired it yet.
func (n *Node) leaseValid(lease int64) bool {
	return lease != 0 && n.lease.Load() == lease && n.mono() < n.validUntil.Load()
}

// nopZap silences the etcd client's own logging: the node logs what
// matters, with the member's context.
func nopZap() *zap.Logger { return zap.NewNop() }
