package main

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

type natsOptions struct {
	server, wsURL, subject string
}

// natsSystem is a nats-server: subscribers on its websocket listener, the
// publisher over NATS's TCP protocol.
type natsSystem struct{ o natsOptions }

func (n *natsSystem) subscribe(ctx context.Context, t *tracker, i int) (subscriber, error) {
	nc, err := nats.Connect(n.o.wsURL, nats.NoReconnect(), nats.Name(fmt.Sprintf("wsbench-sub-%d", i)))
	if err != nil {
		return nil, err
	}
	sub, err := nc.Subscribe(n.o.subject, func(m *nats.Msg) {
		t.deliver(i, [][]byte{m.Data}, time.Now().UnixNano())
	})
	if err == nil {
		// No client-side drops: the Felix subscriber keeps every frame it
		// reads too, so a loss is the server's.
		err = sub.SetPendingLimits(-1, -1)
	}
	if err == nil {
		// The server has the subscription once it answered the PING after it.
		err = nc.FlushWithContext(ctx)
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &natsSubscriber{nc: nc}, nil
}

type natsSubscriber struct{ nc *nats.Conn }

// close closes the connection; nats.go's Close waits for its goroutines.
func (s *natsSubscriber) close() { s.nc.Close() }

func (n *natsSystem) dialPublisher(ctx context.Context) (publisher, error) {
	nc, err := nats.Connect(n.o.server, nats.NoReconnect(), nats.Name("wsbench-pub"))
	if err != nil {
		return nil, err
	}
	return &natsPublisher{nc: nc, subject: n.o.subject}, nil
}

// natsPublisher publishes on NATS's buffered connection: core NATS has no
// acks, and flush is a PING's round trip.
type natsPublisher struct {
	nc      *nats.Conn
	subject string
}

func (p *natsPublisher) publish(_ context.Context, payload []byte) error {
	return p.nc.Publish(p.subject, payload)
}

func (p *natsPublisher) flush(ctx context.Context) error {
	if err := p.nc.FlushWithContext(ctx); err != nil {
		return err
	}
	return p.nc.LastError()
}

func (p *natsPublisher) close() { p.nc.Close() }
