package linearizable_test

import (
	"fmt"
	"hash/maphash"
	"strings"
	"sync"

	"github.com/anishathalye/porcupine"
)

// The model the compare-and-set workload is checked against: one shard's
// log as a sequence of values, with two operations.
//
//	cas(expected, v) -> written at offset o  (the log had length expected = o; v is appended)
//	cas(expected, v) -> refused, tail t      (the log had length t != expected; nothing changes)
//	cas(expected, v) -> unknown              (written as above, or nothing happened)
//	read             -> records              (the log is exactly records)
//
// Every cas writes a value of its own, so a read's records name the writes
// it saw.

// opKind is what an operation did.
type opKind uint8

const (
	opCAS opKind = iota
	opRead
)

// logInput is an operation's call.
type logInput struct {
	kind     opKind
	expected uint64 // cas: the tail the client last saw
	value    string // cas: what it writes, unique in the history
	via      string // where it went: "cluster" or a member's node id
}

// outcome is how a cas ended.
type outcome uint8

const (
	written outcome = iota
	refused
	unknown // no answer, or one that does not say (a lost connection, leadership_lost)
)

// logOutput is an operation's answer.
type logOutput struct {
	outcome outcome
	offset  uint64   // written: where
	tail    uint64   // refused: the shard's next offset as the refusal said
	records *logNode // read: the log the read returned
	length  uint64   // read: how many records
}

// logNode is one log, as its last value and the log before it. Logs are
// interned (logTable): two equal logs are the same *logNode, so the
// model compares states, and reads with states, by pointer; nil is the
// empty log.
type logNode struct {
	prev  *logNode
	value string
	len   uint64
}

type nodeKey struct {
	prev  *logNode
	value string
}

// logTable interns logs. The checker steps the model from several
// goroutines, hence the lock.
type logTable struct {
	seed maphash.Seed
	mu   struct {
		sync.Mutex
		nodes map[nodeKey]*logNode
	}
}

func newLogTable() *logTable {
	lt := &logTable{seed: maphash.MakeSeed()}
	lt.mu.nodes = make(map[nodeKey]*logNode)
	return lt
}

// append returns the log l followed by value.
func (lt *logTable) append(l *logNode, value string) *logNode {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	k := nodeKey{l, value}
	if n, ok := lt.mu.nodes[k]; ok {
		return n
	}
	n := &logNode{prev: l, value: value, len: l.length() + 1}
	lt.mu.nodes[k] = n
	return n
}

// log returns the interned log of values.
func (lt *logTable) log(values []string) *logNode {
	var l *logNode
	for _, v := range values {
		l = lt.append(l, v)
	}
	return l
}

func (l *logNode) length() uint64 {
	if l == nil {
		return 0
	}
	return l.len
}

// describe shows a log's length and its last few values.
func (l *logNode) describe() string {
	const shown = 4
	var last []string
	for n := l; n != nil && len(last) < shown; n = n.prev {
		last = append([]string{n.value}, last...)
	}
	more := ""
	if l.length() > shown {
		more = "… "
	}
	return fmt.Sprintf("%d records [%s%s]", l.length(), more, strings.Join(last, " "))
}

// logModel is the model over lt's logs.
func logModel(lt *logTable) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return []any{(*logNode)(nil)} },
		Step: func(state, input, output any) []any {
			return lt.step(state.(*logNode), input.(logInput), output.(logOutput))
		},
		Equal: func(a, b any) bool { return a.(*logNode) == b.(*logNode) },
		Hash: func(state any) uint64 {
			l := state.(*logNode)
			if l == nil {
				return 0
			}
			return maphash.String(lt.seed, l.value) ^ l.len
		},
		DescribeOperation: describeOperation,
		DescribeState:     func(state any) string { return state.(*logNode).describe() },
	}
	return nm.ToModel()
}

// step returns the logs state can become by the operation: none when it
// could not have answered so.
func (lt *logTable) step(state *logNode, in logInput, out logOutput) []any {
	n := state.length()
	if in.kind == opRead {
		if out.records == state {
			return []any{state}
		}
		return nil
	}
	switch out.outcome {
	case written:
		if n == in.expected && out.offset == in.expected {
			return []any{lt.append(state, in.value)}
		}
	case refused:
		if n != in.expected && out.tail == n {
			return []any{state}
		}
	case unknown:
		if n == in.expected {
			return []any{state, lt.append(state, in.value)}
		}
		return []any{state}
	}
	return nil
}

func describeOperation(input, output any) string {
	in, out := input.(logInput), output.(logOutput)
	if in.kind == opRead {
		return fmt.Sprintf("read via %s -> %s", in.via, out.records.describe())
	}
	call := fmt.Sprintf("cas(%d, %s) via %s", in.expected, in.value, in.via)
	switch out.outcome {
	case written:
		return fmt.Sprintf("%s -> written at %d", call, out.offset)
	case refused:
		return fmt.Sprintf("%s -> refused, tail %d", call, out.tail)
	}
	return call + " -> unknown"
}
