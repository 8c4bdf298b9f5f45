package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/webfront"
)

type felixOptions struct {
	addr, browser, ca, token, tenant, namespace, stream string
}

// felixSystem is a Felix broker: subscribers on its browser front end,
// the publisher over felix/1.
type felixSystem struct{ o felixOptions }

// felixReadLimit is the largest WebSocket message a subscriber takes: an
// events frame holds a coalesced batch, well under this.
const felixReadLimit = 64 << 20

func (f *felixSystem) subscribe(ctx context.Context, t *tracker, i int) (subscriber, error) {
	ws, _, err := websocket.Dial(ctx, "ws://"+f.o.browser+"/", nil)
	if err != nil {
		return nil, err
	}
	ws.SetReadLimit(felixReadLimit)
	s := &felixSubscriber{ws: ws, done: make(chan struct{})}
	if err := s.call(ctx, &webfront.Request{Op: webfront.OpAuth, Tenant: f.o.tenant, Token: f.o.token}); err != nil {
		_ = ws.CloseNow()
		return nil, fmt.Errorf("auth: %w", err)
	}
	if err := s.call(ctx, &webfront.Request{Op: webfront.OpSubscribe, Namespace: f.o.namespace, Stream: f.o.stream, Start: "latest"}); err != nil {
		_ = ws.CloseNow()
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	go s.read(t, i)
	return s, nil
}

// felixSubscriber is one browser-framed WebSocket connection with one
// subscription.
type felixSubscriber struct {
	ws     *websocket.Conn
	nextID uint64
	done   chan struct{}
}

// call sends r and waits for its reply; nothing is published before every
// subscriber is in, so no events come first.
func (s *felixSubscriber) call(ctx context.Context, r *webfront.Request) error {
	s.nextID++
	r.ID = s.nextID
	b, err := webfront.AppendRequest(nil, r)
	if err != nil {
		return err
	}
	if err := s.ws.Write(ctx, websocket.MessageBinary, b); err != nil {
		return err
	}
	for {
		_, msg, err := s.ws.Read(ctx)
		if err != nil {
			return err
		}
		rep, err := webfront.DecodeReply(msg)
		if err != nil {
			return err
		}
		if rep.Op != webfront.OpReply || rep.ID != r.ID {
			continue
		}
		if rep.Error != nil {
			return fmt.Errorf("%s: %s", rep.Error.Name, rep.Error.Message)
		}
		return nil
	}
}

// read hands every events frame to t until the connection ends.
func (s *felixSubscriber) read(t *tracker, i int) {
	defer close(s.done)
	for {
		_, msg, err := s.ws.Read(context.Background())
		if err != nil {
			return // closed: close() ends the run's connections
		}
		at := time.Now().UnixNano()
		if len(msg) == 0 || msg[0] != webfront.KindEvents {
			continue // an ended frame: its records are missing, and counted so
		}
		ev, err := webfront.DecodeEvents(msg)
		if err != nil {
			continue
		}
		t.deliver(i, ev.Payloads, at)
	}
}

func (s *felixSubscriber) close() {
	_ = s.ws.CloseNow()
	<-s.done
}

func (f *felixSystem) dialPublisher(ctx context.Context) (publisher, error) {
	c, err := client.Dial(ctx, f.o.addr, client.Options{Tenant: f.o.tenant, Token: f.o.token, CAFile: f.o.ca})
	if err != nil {
		return nil, err
	}
	return &felixPublisher{c: c, stream: client.Stream{Namespace: f.o.namespace, Name: f.o.stream}}, nil
}

// felixPublisher publishes each record on its own, acked and pipelined
// (client.Produce), so records go out as soon as they are made, as a NATS
// client's do.
type felixPublisher struct {
	c      *client.Client
	stream client.Stream
	mu     struct {
		sync.Mutex
		err error // the first refused publish
	}
}

func (p *felixPublisher) publish(ctx context.Context, payload []byte) error {
	return p.c.Produce(ctx, p.stream, [][]byte{payload}, client.PublishOptions{}, p.acked)
}

func (p *felixPublisher) acked(_ client.PublishResult, err error) {
	if err == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.err == nil {
		p.mu.err = err
	}
}

func (p *felixPublisher) flush(ctx context.Context) error {
	err := p.c.Flush(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	return errors.Join(err, p.mu.err)
}

func (p *felixPublisher) close() { _ = p.c.Close(context.Background()) }
