package client_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/internal/quicconf"
	"github.com/getfelix/felix-go/wire"
)

// TestReauthenticateAfterExpiry: a token that expires ends the connection's
// subscription with ErrTokenExpired (an unauthenticated error) and refuses
// new operations; Reauthenticate with a fresh token restores service on the
// same connection, and a refused one leaves it as it was.
func TestReauthenticateAfterExpiry(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := brokertest.DialOptions(t, b, cfg, client.Options{Token: brokertest.TokenFor(t, cfg, "default", 2*time.Second)})
	st := client.Stream{Name: "expiring"}
	sub, err := c.Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		t.Fatalf("subscribe with a fresh token: %v", err)
	}
	if err := c.Publish(ctx, st, []byte("before"), client.PublishOptions{}); err != nil {
		t.Fatalf("publish with a fresh token: %v", err)
	}
	if ev, err := sub.Next(ctx); err != nil || string(ev.Payload) != "before" {
		t.Fatalf("first event = %q, %v; want \"before\"", ev.Payload, err)
	}

	// Nothing more is published: Next returns when the broker ends the
	// subscription at the token's expiry.
	ev, err := sub.Next(ctx)
	if !errors.Is(err, wire.ErrUnauthenticated) || !errors.Is(err, client.ErrTokenExpired) {
		t.Fatalf("subscription at expiry: Next = %q, %v; want ErrTokenExpired (unauthenticated)", ev.Payload, err)
	}
	if err := c.Publish(ctx, st, []byte("refused"), client.PublishOptions{}); !errors.Is(err, wire.ErrUnauthenticated) {
		t.Fatalf("publish after expiry = %v, want unauthenticated", err)
	}

	// A token of another tenant is refused; a call that gives up before its
	// answer must not leave that answer to the next call.
	other := brokertest.Token(t, cfg, "other")
	if err := c.Reauthenticate(ctx, other); !errors.Is(err, wire.ErrUnauthenticated) {
		t.Fatalf("Reauthenticate with tenant other's token on a default connection = %v, want unauthenticated", err)
	}
	gaveUp, giveUp := context.WithCancel(ctx)
	giveUp()
	if err := c.Reauthenticate(gaveUp, other); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, wire.ErrUnauthenticated) {
		t.Fatalf("Reauthenticate with a done context = %v, want context.Canceled (or its answer)", err)
	}
	if err := c.Reauthenticate(ctx, brokertest.Token(t, cfg, "default")); err != nil {
		t.Fatalf("Reauthenticate with a fresh token = %v, want nil", err)
	}

	sub, err = c.Subscribe(ctx, st, client.SubscribeOptions{})
	if err != nil {
		t.Fatalf("subscribe after Reauthenticate: %v", err)
	}
	if err := c.Publish(ctx, st, []byte("after"), client.PublishOptions{}); err != nil {
		t.Fatalf("publish after Reauthenticate: %v", err)
	}
	if ev, err := sub.Next(ctx); err != nil || string(ev.Payload) != "after" {
		t.Fatalf("event after Reauthenticate = %q, %v; want \"after\"", ev.Payload, err)
	}
}

// TestDialDefaultToken: with no Options.Token, Dial sends the token in
// ./felix-data/admin.token when the file exists; without it the broker's
// refusal, which says how to get a token, comes back as unauthenticated.
// Not parallel: it changes the working directory.
func TestDialDefaultToken(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := client.Options{CAFile: filepath.Join(cfg.DataDir, quicconf.CertFile)}

	t.Chdir(t.TempDir())
	_, err := client.Dial(ctx, b.Addr().String(), opts)
	if !errors.Is(err, wire.ErrUnauthenticated) {
		t.Fatalf("Dial with no token and no %s = %v, want unauthenticated", client.DefaultTokenFile, err)
	}
	var werr *wire.Error
	if !errors.As(err, &werr) || werr.Message == "" {
		t.Fatalf("Dial with no token = %#v, want the broker's *wire.Error with its message", err)
	}
	for _, want := range []string{"no token", "felix token create", "admin.token"} {
		if !strings.Contains(werr.Message, want) {
			t.Errorf("refusal %q does not mention %q", werr.Message, want)
		}
	}

	if err := os.MkdirAll(filepath.Dir(client.DefaultTokenFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(client.DefaultTokenFile, []byte(brokertest.Token(t, cfg, "default")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(ctx, b.Addr().String(), opts)
	if err != nil {
		t.Fatalf("Dial with ./%s: %v", client.DefaultTokenFile, err)
	}
	defer c.Close(ctx)
	if err := c.Publish(ctx, client.Stream{Name: "local"}, []byte("x"), client.PublishOptions{}); err != nil {
		t.Errorf("publish with the default token: %v", err)
	}

	// An explicit token wins over the file.
	opts.Token = "not-a-token"
	if _, err := client.Dial(ctx, b.Addr().String(), opts); !errors.Is(err, wire.ErrUnauthenticated) {
		t.Errorf("Dial with Token %q beside a valid default file = %v, want unauthenticated", opts.Token, err)
	}
}
