package broker_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/client"
)

// TestCrashedRegistryIsRestarted: a panic in the registry is its guardian's
// to handle: it restarts, and the broker keeps serving.
func TestCrashedRegistryIsRestarted(t *testing.T) {
	cfg := chaosConfig(t)
	b := brokertest.Start(t, cfg)
	ctx := brokertest.Context(t, 20*time.Second)
	if _, err := b.Kill(broker.KillRequest{Path: "felix/registry", Mode: "panic"}); err != nil {
		t.Fatalf("kill felix/registry: %v", err)
	}
	brokertest.Eventually(t, ctx, "the registry's restart in the tree", func() bool {
		a, ok := brokertest.ActorAt(b, "felix/registry")
		return ok && a.Restarts == 1
	})
	c := brokertest.Dial(t, b, cfg)
	if err := c.Publish(ctx, client.Stream{Namespace: "core", Name: "after"}, []byte("x"), client.PublishOptions{}); err != nil {
		t.Fatalf("publish after the registry's restart: %v", err)
	}
	select {
	case err := <-b.Fatal():
		t.Fatalf("Fatal reported %v after a restart", err)
	default:
	}
}

// TestStoppedRegistryStopsTheBroker: with its registry gone the broker
// cannot serve, so it says so on Fatal and stops itself (its admin
// endpoint with it); a later Stop waits for that one.
func TestStoppedRegistryStopsTheBroker(t *testing.T) {
	cfg := chaosConfig(t)
	b := brokertest.Start(t, cfg)
	ctx := brokertest.Context(t, 20*time.Second)
	ready := brokertest.AdminURL(t, b, "/ready")
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	if code, _, err := brokertest.Get(ctx, hc, ready); err != nil || code != http.StatusOK {
		t.Fatalf("/ready before: %d, %v", code, err)
	}
	if _, err := b.Kill(broker.KillRequest{Path: "felix/registry", Mode: "stop"}); err != nil {
		t.Fatalf("stop felix/registry: %v", err)
	}
	select {
	case err := <-b.Fatal():
		if !errors.Is(err, broker.ErrCoreActorStopped) {
			t.Fatalf("Fatal reported %v, want ErrCoreActorStopped", err)
		}
	case <-ctx.Done():
		t.Fatal("Fatal reported nothing after the registry stopped")
	}
	if err := b.Stop(ctx); err != nil {
		t.Fatalf("Stop after the broker stopped itself: %v", err)
	}
	if code, _, err := brokertest.Get(ctx, hc, ready); err == nil {
		t.Errorf("/ready after the broker stopped: %d, want no answer", code)
	}
}
