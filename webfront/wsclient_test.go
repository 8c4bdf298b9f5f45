package webfront_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/coder/websocket"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/webfront"
)

// wsClient is a test's side of a browser connection: requests out, and
// replies and events kept apart as they arrive.
type wsClient struct {
	tb     testing.TB
	ws     *websocket.Conn
	nextID uint64
}

func dialWS(tb testing.TB, ctx context.Context, b *broker.Broker, origin string) (*wsClient, error) {
	tb.Helper()
	h := http.Header{}
	if origin != "" {
		h.Set("Origin", origin)
	}
	ws, _, err := websocket.Dial(ctx, "ws://"+b.BrowserAddr().String()+"/", &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		return nil, err
	}
	ws.SetReadLimit(64 << 20)
	tb.Cleanup(func() { _ = ws.CloseNow() })
	return &wsClient{tb: tb, ws: ws}, nil
}

func (c *wsClient) send(ctx context.Context, r *webfront.Request) uint64 {
	c.tb.Helper()
	c.nextID++
	r.ID = c.nextID
	b, err := webfront.AppendRequest(nil, r)
	if err != nil {
		c.tb.Fatal(err)
	}
	if err := c.ws.Write(ctx, websocket.MessageBinary, b); err != nil {
		c.tb.Fatalf("write %s: %v", r.Op, err)
	}
	return r.ID
}

// next reads one frame: a reply (or ended) or events.
func (c *wsClient) next(ctx context.Context) (*webfront.Reply, *webfront.Events, error) {
	_, b, err := c.ws.Read(ctx)
	if err != nil {
		return nil, nil, err
	}
	if len(b) > 0 && b[0] == webfront.KindEvents {
		ev, err := webfront.DecodeEvents(b)
		return nil, ev, err
	}
	rep, err := webfront.DecodeReply(b)
	return rep, nil, err
}

// call sends r and returns its reply; events that arrive first are kept in
// *pending.
func (c *wsClient) call(ctx context.Context, r *webfront.Request, pending *[]*webfront.Events) *webfront.Reply {
	c.tb.Helper()
	id := c.send(ctx, r)
	for {
		rep, ev, err := c.next(ctx)
		if err != nil {
			c.tb.Fatalf("waiting for the reply to %s: %v", r.Op, err)
		}
		if ev != nil {
			if pending != nil {
				*pending = append(*pending, ev)
			}
			continue
		}
		if rep.Op == webfront.OpReply && rep.ID == id {
			return rep
		}
	}
}

func (c *wsClient) mustCall(ctx context.Context, r *webfront.Request, pending *[]*webfront.Events) *webfront.Reply {
	c.tb.Helper()
	rep := c.call(ctx, r, pending)
	if rep.Error != nil {
		c.tb.Fatalf("%s refused: %+v", r.Op, *rep.Error)
	}
	return rep
}
