package main

import (
	"strings"
	"testing"

	"github.com/getfelix/felix-go/broker"
)

// TestPrintTreeNamesCaches: felix tree prints a cache's shard with its
// cache label, and a watch's feeder with the cache and what it watches,
// so an operator tells them from a stream's.
func TestPrintTreeNamesCaches(t *testing.T) {
	list := []broker.ActorInfo{
		{Path: "felix/streams", Kind: "supervisor"},
		{Path: "felix/streams/default:default:orders:0", Kind: "shard", Parent: "felix/streams", Labels: map[string]string{"stream": "default/default/orders", "shard": "0"}},
		{Path: "felix/streams/default:default:sessions:0", Kind: "shard", Parent: "felix/streams", Labels: map[string]string{"cache": "default/default/sessions", "shard": "0"}},
		{Path: "felix/subscribers/sub-7", Kind: "feeder", Labels: map[string]string{"cache": "default/default/sessions", "shard": "0", "watch": "prefix user/", "subscription": "7"}},
	}
	var out strings.Builder
	printTree(&out, list, false)
	for _, want := range []string{
		"default:default:orders:0 [shard] depth 0/0 stream=default/default/orders shard=0\n",
		"default:default:sessions:0 [shard] depth 0/0 cache=default/default/sessions shard=0\n",
		"felix/subscribers/sub-7 [feeder] depth 0/0 cache=default/default/sessions shard=0 watch=prefix user/ subscription=7\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("felix tree printed\n%s\nwithout the line %q", out.String(), want)
		}
	}
}
