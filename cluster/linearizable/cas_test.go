package linearizable_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

// casClients is how many clients run the compare-and-set workload.
const casClients = 6

// readShare is one in readShare of a compare-and-set client's operations
// being a whole-log read; the others are conditional publishes.
const readShare = 4

// runCAS: clients each publish with PublishIf at the tail they last saw
// (from their last write, refusal or read), a value of their own, and
// read the whole log now and then (ClientFor + Read, at the member the
// ClusterClient takes for the shard's owner). The history must be
// linearizable against the log model; every written value must be in
// every replica at the offset it was written at, once; the replicas
// identical.
func runCAS(t *testing.T, r *run) {
	lt := newLogTable()
	var wg sync.WaitGroup
	defer r.halt(&wg) // also when the test fails before the end
	var answers tally
	for i := range casClients {
		cc := r.dial(t)
		rng := rand.New(rand.NewPCG(uint64(r.seed), uint64(i)))
		wg.Go(func() { casClient(r, cc, lt, i, rng, &answers) })
	}
	r.nem.run(t)
	r.halt(&wg)
	t.Logf("faults: %s", r.nem)
	t.Logf("answers: %s", &answers)

	logs := r.converge(t)
	final := checkFinalLogs(t, logs)
	// The final log is a read after every operation: what an operation
	// of unknown outcome did is then decided, and a refused write's value
	// in the log is caught.
	at := r.h.now()
	values := make([]string, len(final))
	for i, rec := range final {
		values[i] = string(rec.Payload)
	}
	r.h.add(casClients, logInput{kind: opRead, via: "the replicas, at the end"}, logOutput{records: lt.log(values), length: uint64(len(values))}, at, at)
	ops := r.h.operations()
	acked, copies := map[string]uint64{}, map[string]int{}
	for _, op := range ops {
		in, out := op.Input.(logInput), op.Output.(logOutput)
		if in.kind == opCAS {
			copies[in.value] = 1
			if out.outcome == written {
				acked[in.value] = out.offset
			}
		}
	}
	report(t, "acknowledged writes lost", lostAcks(final, acked))
	report(t, "duplicates", duplicates(final, copies))
	report(t, "operations that saw less than one done before them", staleReads(casShowsAndReads(ops)))
	start := time.Now()
	res, err := linearizable(lt, ops, r.checkFor, keptFile(t, "cas.html"), r.nem.annotations()...)
	t.Logf("porcupine: %d operations, %s in %s", len(ops), res, time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Errorf("not linearizable: %v", err)
	}
}

// casClient runs one client's operations until the run stops.
func casClient(r *run, cc *client.ClusterClient, lt *logTable, id int, rng *rand.Rand, answers *tally) {
	var tail uint64
	for n := 0; !r.stopped(); n++ {
		if rng.IntN(readShare) == 0 {
			if values, ok := casRead(r, cc, lt, id); ok {
				tail = values
			}
			continue
		}
		in := logInput{kind: opCAS, expected: tail, value: fmt.Sprintf("c%d-%d", id, n), via: "cluster"}
		ctx, cancel := r.opContext()
		call := r.h.now()
		off, err := cc.PublishIf(ctx, r.stream, [][]byte{[]byte(in.value)}, tail, client.PublishOptions{})
		ret := r.h.now()
		cancel()
		a, ref := classify(err)
		switch a {
		case answerOK:
			answers.add("written")
			r.h.add(id, in, logOutput{outcome: written, offset: off}, call, ret)
			tail = off + 1
		case answerRefused:
			answers.add("refused")
			r.h.add(id, in, logOutput{outcome: refused, tail: ref.Tail}, call, ret)
			tail = ref.Tail
		case answerFailed:
			// Nothing was written: as if it never happened.
			answers.add("failed")
		case answerUnknown:
			answers.add("unknown")
			r.h.add(id, in, logOutput{outcome: unknown}, call, pendingReturn)
		}
	}
}

// casRead reads the whole log through the connection the ClusterClient
// has to the shard's owner, records it, and returns its length; a read
// that failed is not recorded (it changed nothing).
func casRead(r *run, cc *client.ClusterClient, lt *logTable, id int) (uint64, bool) {
	ctx, cancel := r.opContext()
	defer cancel()
	call := r.h.now()
	cl, err := cc.ClientFor(ctx, r.stream, 0)
	if err != nil {
		return 0, false
	}
	log, err := readAll(ctx, cl, r.stream, client.ReadOptions{})
	ret := r.h.now()
	if err != nil {
		var refusal *wire.Error
		if errors.As(err, &refusal) {
			refreshOwners(r, cc)
		}
		return 0, false
	}
	values := make([]string, len(log))
	for i, rec := range log {
		values[i] = string(rec.Payload)
	}
	n := uint64(len(values))
	r.h.add(id, logInput{kind: opRead, via: "cluster"}, logOutput{records: lt.log(values), length: n}, call, ret)
	return n, true
}
