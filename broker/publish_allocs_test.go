package broker

import (
	"testing"

	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/streams"
)

// TestAcceptedPublishAnswerAllocatesNothing: the shard's answer to an
// accepted publish reaches the front end's callback without allocating
// (refusal's errors.As targets escaped: two allocations per publish).
func TestAcceptedPublishAnswerAllocatesNothing(t *testing.T) {
	var got service.PublishResult
	sp := shardPublish(&service.Publish{Payloads: [][]byte{[]byte("x")}}, streams.Def{}, func(r service.PublishResult) { got = r })
	allocs := testing.AllocsPerRun(100, func() { sp.Done(streams.PublishResult{Base: 7}) })
	if allocs != 0 {
		t.Errorf("answering an accepted publish allocated %.1f times, want 0", allocs)
	}
	if got.Offset != 7 || got.Err != nil {
		t.Errorf("the answer = %+v, want offset 7 and no error", got)
	}
}
