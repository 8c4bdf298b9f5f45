package linearizable_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/getfelix/felix-go/client"
)

// sends is what the acknowledged-publish and stale-read workloads' producers
// sent and were told.
type sends struct {
	mu struct {
		sync.Mutex
		acked  map[string]uint64 // payload to its acknowledged offset
		shows  []shown           // each ack: the log had its offset + 1 records when it returned
		copies map[string]int    // how many times each payload may be in the log (duplicates)
	}
}

func newSends() *sends {
	s := &sends{}
	s.mu.acked, s.mu.copies = map[string]uint64{}, map[string]int{}
	return s
}

// sending registers a payload about to be sent for the first time:
// an idempotent one may be in the log once, a plain one once per attempt
// acknowledged or of unknown outcome (mayHold adds each).
func (s *sends) sending(payload string, idempotent bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.copies[payload] = 0
	if idempotent {
		s.mu.copies[payload] = 1
	}
}

// mayHold counts a plain attempt that may have written payload.
func (s *sends) mayHold(payload string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.copies[payload]++
}

// ack records payload acknowledged at offset, the ack returned at ret.
func (s *sends) ack(payload string, offset uint64, ret int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.acked[payload] = offset
	s.mu.shows = append(s.mu.shows, shown{ret: ret, floor: offset + 1, what: fmt.Sprintf("the ack of %q at %d", payload, offset)})
}

// snapshot copies what the checks need.
func (s *sends) snapshot() (acked map[string]uint64, shows []shown, copies map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	acked, copies = map[string]uint64{}, map[string]int{}
	for p, o := range s.mu.acked {
		acked[p] = o
	}
	for p, n := range s.mu.copies {
		copies[p] = n
	}
	return acked, append([]shown(nil), s.mu.shows...), copies
}

// plainProducer publishes one-record batches through the ClusterClient
// until the run stops. It sends a payload again after any answer but an
// ack, as an at-least-once producer would; each attempt of unknown
// outcome may add a copy.
func plainProducer(r *run, cc *client.ClusterClient, id int, s *sends, answers *tally) {
	for n := 0; !r.stopped(); n++ {
		payload := fmt.Sprintf("p%d-%d", id, n)
		s.sending(payload, false)
		for !r.stopped() {
			ctx, cancel := r.opContext()
			res, err := cc.PublishResult(ctx, r.stream, [][]byte{[]byte(payload)}, client.PublishOptions{})
			ret := r.h.now()
			cancel()
			a, _ := classify(err)
			answers.add(fmt.Sprintf("plain %s", answerName(a)))
			if a == answerOK || a == answerUnknown {
				s.mayHold(payload)
			}
			if a == answerOK {
				s.ack(payload, res.Offset, ret)
				break
			}
		}
	}
}

// idempotentProducer publishes one-record batches with an idempotent
// producer until the run stops, repeating a batch until it is acked (the
// producer re-sends one of unknown outcome with its sequence).
func idempotentProducer(t *testing.T, r *run, cc *client.ClusterClient, id int, s *sends, answers *tally) func() {
	t.Helper()
	ctx, cancel := r.opContext()
	p, err := cc.NewIdempotentProducer(ctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	p.AckTimeout = opTimeout / 2
	return func() {
		defer func() { _ = p.Close(context.Background()) }()
		for n := 0; !r.stopped(); n++ {
			payload := fmt.Sprintf("i%d-%d", id, n)
			s.sending(payload, true)
			for !r.stopped() {
				ctx, cancel := r.opContext()
				res, err := p.Publish(ctx, r.stream, [][]byte{[]byte(payload)}, nil)
				ret := r.h.now()
				cancel()
				a, _ := classify(err)
				answers.add(fmt.Sprintf("idempotent %s", answerName(a)))
				if a == answerOK {
					s.ack(payload, res.Offset, ret)
					break
				}
			}
		}
	}
}

func answerName(a answer) string {
	return [...]string{answerOK: "acked", answerRefused: "refused", answerFailed: "failed", answerUnknown: "unknown"}[a]
}
