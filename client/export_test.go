package client

import (
	"context"

	"github.com/getfelix/felix-go/wire"
)

// SetInflightHook installs c's testHookInflight; call it before c's first
// publish.
func SetInflightHook(c *Client, h func(requests int, bytes int64)) { c.testHookInflight = h }

// SetSendHook installs c's testHookSend: it sees every acked publish as it
// is encoded. Call it before c's first publish.
func SetSendHook(c *Client, h func(*wire.Publish)) { c.testHookSend = h }

// SetRouteHook installs cc's testHookRoute: it is asked with the address of
// every routed call before the call is made, and an error it returns is
// taken as that broker's answer. Call it before cc's first call.
func SetRouteHook(cc *ClusterClient, h func(addr string) error) { cc.testHookRoute = h }

// Dials counts cc's dial attempts.
func Dials(cc *ClusterClient) int64 { return cc.dials.Load() }

// SetWatchHook installs cc's testHookWatch: it sees every answer a watch
// of overdue calls gets. Call it before cc's first call.
func SetWatchHook(cc *ClusterClient, h func(from string, owner bool, err error, other string)) {
	cc.testHookWatch = h
}

// Route makes call at the owner of s's shard 0 as a routed publish is made
// (not retried when its outcome is unknown), hedged like one.
func Route(ctx context.Context, cc *ClusterClient, s Stream, call func(*Client) error) error {
	return cc.route(ctx, cc.scope(s), fixedShard(0), false, call)
}
