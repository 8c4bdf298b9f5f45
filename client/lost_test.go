package client_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
)

// TestConnectionLossSaysWhy: a client whose broker goes away reports what
// happened, not a bare "client: closed": that the broker closed the
// connection, or that nothing answered within the idle timeout. Both used
// to read "client: closed".
func TestConnectionLossSaysWhy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	t.Run("broker stopped", func(t *testing.T) {
		cfg := brokertest.Config(t)
		b := brokertest.Start(t, cfg)
		c := brokertest.Dial(t, b, cfg)
		sub, err := c.Subscribe(ctx, client.Stream{Name: "s"}, client.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		// The subscription ends when the connection does.
		for {
			if _, err := sub.Next(ctx); err != nil {
				break
			}
		}
		err = c.Publish(ctx, client.Stream{Name: "s"}, []byte("x"), client.PublishOptions{})
		var lost *client.ConnectionLostError
		if !errors.As(err, &lost) || !strings.Contains(err.Error(), "the broker closed it") {
			t.Fatalf("publish after the broker stopped: %v, want a ConnectionLostError saying the broker closed it", err)
		}
	})

	t.Run("broker silent", func(t *testing.T) {
		// A UDP socket that reads and never answers stands in for a broker
		// that vanished mid-handshake.
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		start := time.Now()
		_, err = client.Dial(ctx, pc.LocalAddr().String(), client.Options{Insecure: true, Token: "x", IdleTimeout: 500 * time.Millisecond})
		if err == nil {
			t.Fatal("dial of a silent address succeeded")
		}
		// Bounds the option taking effect (quic-go's default would wait 5 s).
		if waited := time.Since(start); waited > 4*time.Second {
			t.Fatalf("dial of a silent address with a 500 ms idle timeout took %s (%v)", waited, err)
		}
	})
}
