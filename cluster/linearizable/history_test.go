package linearizable_test

import (
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// history records what the clients did, each operation with its call and
// return times on one monotonic clock (nanoseconds since start).
type history struct {
	start time.Time
	mu    struct {
		sync.Mutex
		ops []porcupine.Operation
	}
}

func newHistory() *history { return &history{start: time.Now()} }

// now is the history's clock: monotonic, since start.
func (h *history) now() int64 { return int64(time.Since(h.start)) }

// pendingReturn marks an operation whose outcome is unknown: it may take
// effect any time after its call, so operations returns it at the end of
// the history.
const pendingReturn = -1

// add records one operation (a workload's model's input and output); ret
// is pendingReturn for an unknown outcome.
func (h *history) add(client int, in, out any, call, ret int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mu.ops = append(h.mu.ops, porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret})
}

// operations is the history so far, operations of unknown outcome
// returning after every other.
func (h *history) operations() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return closePending(h.mu.ops)
}

// closePending copies ops, giving each pending operation a return after
// every call and return in ops.
func closePending(ops []porcupine.Operation) []porcupine.Operation {
	var end int64
	for _, op := range ops {
		end = max(end, op.Call, op.Return)
	}
	out := make([]porcupine.Operation, len(ops))
	for i, op := range ops {
		if op.Return == pendingReturn {
			op.Return = end + 1
		}
		out[i] = op
	}
	return out
}
