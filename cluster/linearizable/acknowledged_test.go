package linearizable_test

import (
	"sync"
	"testing"
)

// Producers of the acknowledged-publish workload.
const (
	idempotentProducers = 3
	plainProducers      = 3
)

// runAcknowledged: idempotent and plain producers publish one-record
// batches through ClusterClients while the faults go on. Then every
// replica's log is read: offsets contiguous from 0, the replicas
// identical, every acknowledged payload at its acknowledged offset (0
// lost), an idempotent producer's payload at most once, a plain one's at
// most once per attempt that was acknowledged or of unknown outcome (a
// copy only from a retry after an unknown outcome), and nothing nobody
// sent.
func runAcknowledged(t *testing.T, r *run) {
	s := newSends()
	var answers tally
	var wg sync.WaitGroup
	defer r.halt(&wg) // also when the test fails before the end
	for i := range idempotentProducers {
		wg.Go(idempotentProducer(t, r, r.dial(t), i, s, &answers))
	}
	for i := range plainProducers {
		cc := r.dial(t)
		wg.Go(func() { plainProducer(r, cc, i, s, &answers) })
	}
	r.nem.run(t)
	r.halt(&wg)
	t.Logf("faults: %s", r.nem)
	t.Logf("answers: %s", &answers)

	final := checkFinalLogs(t, r.converge(t))
	acked, _, copies := s.snapshot()
	t.Logf("%d payloads acknowledged, %d in the log", len(acked), len(final))
	report(t, "acknowledged records lost", lostAcks(final, acked))
	report(t, "duplicates", duplicates(final, copies))
}
