package broker_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/cache"
	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

// TestCacheValueSizes: a value of up to a cache's bound is put and read
// back whole (one past 64 KiB, where control messages stop, and the bound
// itself); one past the bound is refused invalid_request, and one past what
// a request may carry is refused by the client before it is sent; none is
// left unanswered.
func TestCacheValueSizes(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	ctx := brokertest.Context(t, 30*time.Second)
	c := brokertest.Dial(t, b, cfg)
	k := client.Cache{Name: "big"}
	if _, err := c.CreateCache(ctx, k, client.CacheSpec{Shards: 1, Durable: true}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{wire.MaxControlBytes + 1, cache.MaxValueBytes} {
		value := bytes.Repeat([]byte{'v'}, n)
		if res, err := c.Put(ctx, k, "k", value, client.PutOptions{}); err != nil || !res.Applied {
			t.Fatalf("put of %d bytes: %+v, %v", n, res, err)
		}
		if got, err := c.Get(ctx, k, "k"); err != nil || !bytes.Equal(got.Value, value) {
			t.Fatalf("get after a put of %d bytes: %d bytes, %v", n, len(got.Value), err)
		}
	}
	for _, n := range []int{cache.MaxValueBytes + 1, wire.MaxCacheWriteBytes} {
		if _, err := c.Put(ctx, k, "k", make([]byte, n), client.PutOptions{}); !errors.Is(err, wire.ErrInvalidRequest) {
			t.Fatalf("put of %d bytes: %v; want invalid_request", n, err)
		}
	}
}
