package linearizable_test

import (
	"fmt"
	"hash/maphash"
	"slices"

	"github.com/anishathalye/porcupine"
)

// The model the cache workload is checked against: each key a register
// with a version, checked on its own (linearizability is local, so the
// history is linearizable if and only if each key's is; porcupine's
// Partition splits it). A key's version is the log offset of the write
// that set it, so on one key versions only grow: every write applied
// after another has a greater version, a delete's included.
//
//	put(v)                 -> applied at V       (V past every version the key had; the key is v at V)
//	put-if-absent(v)       -> applied at V       (the key was absent)
//	put-if-absent(v)       -> refused, at C      (the key was present at version C)
//	put-if-version(E, v)   -> applied at V       (the key was present at E; V > E)
//	put-if-version(E, v)   -> refused [at C]     (absent, or present at C != E)
//	delete-if-version(E)   -> applied at V, prev (the key was present at E holding prev; now absent)
//	delete-if-version(E)   -> refused [at C]     (as put-if-version)
//	any write              -> unknown            (applied as above, or nothing happened)
//	get                    -> v at V, or absent
//
// Every put writes a value of its own, so a get's value names the write
// it saw. A write of unknown outcome that applied has a version nobody
// was told: the register holds its value with the version unbound, and
// the first operation that names the key's version (a get, a refusal, a
// put-if that applied at it) binds it, provided it is past every version
// the key had before that write.

// cacheOpKind is what a cache operation did.
type cacheOpKind uint8

const (
	cacheGet cacheOpKind = iota
	cachePut
	cachePutIfAbsent
	cachePutIfVersion
	cacheDeleteIf
)

func (k cacheOpKind) String() string {
	return [...]string{"get", "put", "put-if-absent", "put-if-version", "delete-if-version"}[k]
}

// cacheInput is a cache operation's call.
type cacheInput struct {
	kind    cacheOpKind
	key     string
	value   string // the puts: what is written, unique in the history
	version uint64 // put-if-version, delete-if-version: the version expected
	via     string // a get's member, when asked directly (else the ClusterClient)
}

// cacheOutput is a cache operation's answer.
type cacheOutput struct {
	outcome outcome // written (applied), refused (condition_failed) or unknown; a get is written
	// found, value and version: a get's answer.
	found   bool
	value   string
	version uint64 // applied: the write's version; refused with present: the key's
	present bool   // refused: whether the refusal named the key's version
	reason  string // refused: why, as the broker said
	// hadPrev and prev: what an applied write replaced or removed.
	hadPrev bool
	prev    string
}

// refusedCondition is the reason a write whose condition did not hold
// was refused with; the workload's cache is far from its key bound, so no
// other reason is legal.
const refusedCondition = "condition_failed"

// register is one key's state. It is a comparable value: porcupine
// compares states with ==.
type register struct {
	present bool
	value   string
	// version is the key's version when bound; unbound after a write of
	// unknown outcome that applied, until an answer names it.
	version uint64
	bound   bool
	// next is the least version the key's next write (or, unbound, its
	// current one) may have: one past every version it is known to have
	// had.
	next uint64
}

// bindVersion returns st with its version v, if st can be at v.
func (st register) bindVersion(v uint64) (register, bool) {
	if !st.present {
		return st, false
	}
	if st.bound {
		return st, st.version == v
	}
	if v < st.next {
		return st, false
	}
	st.version, st.bound, st.next = v, true, v+1
	return st, true
}

// setTo is st after a write of value at version v (v bound) or at a
// version nobody was told (bound false).
func (st register) setTo(value string, v uint64, bound bool) register {
	if st.bound {
		st.next = max(st.next, st.version+1)
	}
	if bound {
		return register{present: true, value: value, version: v, bound: true, next: v + 1}
	}
	return register{present: true, value: value, next: st.next}
}

// deleted is st after a delete at version v (bound false: unknown).
func (st register) deleted(v uint64, bound bool) register {
	if st.bound {
		st.next = max(st.next, st.version+1)
	}
	if bound {
		st.next = max(st.next, v+1)
	}
	return register{next: st.next}
}

// cacheModel is the per-key register model, the history partitioned by
// key.
func cacheModel() porcupine.Model {
	seed := maphash.MakeSeed()
	nm := porcupine.NondeterministicModel{
		Partition: partitionByKey,
		Init:      func() []any { return []any{register{}} },
		Step: func(state, input, output any) []any {
			return stepRegister(state.(register), input.(cacheInput), output.(cacheOutput))
		},
		Hash: func(state any) uint64 {
			st := state.(register)
			return maphash.String(seed, st.value) ^ st.version ^ st.next<<1
		},
		DescribeOperation: describeCacheOperation,
		DescribeState:     describeRegister,
	}
	return nm.ToModel()
}

// partitionByKey splits a history into one per key, in key order.
func partitionByKey(ops []porcupine.Operation) [][]porcupine.Operation {
	byKey := map[string][]porcupine.Operation{}
	for _, op := range ops {
		k := op.Input.(cacheInput).key
		byKey[k] = append(byKey[k], op)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([][]porcupine.Operation, len(keys))
	for i, k := range keys {
		out[i] = byKey[k]
	}
	return out
}

// stepRegister returns the states st can become by the operation: none
// when it could not have answered so.
func stepRegister(st register, in cacheInput, out cacheOutput) []any {
	if in.kind == cacheGet {
		if !out.found {
			return states(st, !st.present)
		}
		if !st.present || st.value != out.value {
			return nil
		}
		next, ok := st.bindVersion(out.version)
		return states(next, ok)
	}
	switch out.outcome {
	case written:
		next, ok := applied(st, in, out)
		return states(next, ok)
	case refused:
		return refusedStates(st, in, out)
	case unknown:
		if next, ok := appliedUnknown(st, in); ok {
			return []any{st, next}
		}
		return []any{st}
	}
	return nil
}

func states(st register, ok bool) []any {
	if !ok {
		return nil
	}
	return []any{st}
}

// applied is st after in applied as out says, if it could have.
func applied(st register, in cacheInput, out cacheOutput) (register, bool) {
	// What the write replaced or removed is the key as it was.
	if out.hadPrev != st.present || out.hadPrev && out.prev != st.value {
		return st, false
	}
	switch in.kind {
	case cachePutIfAbsent:
		if st.present {
			return st, false
		}
	case cachePutIfVersion, cacheDeleteIf:
		var ok bool
		if st, ok = st.bindVersion(in.version); !ok {
			return st, false
		}
	}
	if out.version < st.next || st.present && !st.bound && out.version == st.next {
		// Not past the key's versions: bound, next is one past its
		// version; unbound, its version is next or later, and this
		// write's is later still.
		return st, false
	}
	if in.kind == cacheDeleteIf {
		return st.deleted(out.version, true), true
	}
	return st.setTo(in.value, out.version, true), true
}

// refusedStates: a refused write changed nothing; its answer names the
// key's version when the key was present.
func refusedStates(st register, in cacheInput, out cacheOutput) []any {
	if in.kind == cachePut || out.reason != refusedCondition || out.present != st.present {
		return nil // a plain put is never refused, nor a write for another reason here
	}
	if !out.present {
		// Absent: a put-if-absent would have applied.
		return states(st, in.kind != cachePutIfAbsent)
	}
	next, ok := st.bindVersion(out.version)
	if !ok || (in.kind == cachePutIfVersion || in.kind == cacheDeleteIf) && out.version == in.version {
		return nil
	}
	return []any{next}
}

// appliedUnknown is st after in applied at a version nobody was told, if
// its condition could hold.
func appliedUnknown(st register, in cacheInput) (register, bool) {
	switch in.kind {
	case cachePutIfAbsent:
		if st.present {
			return st, false
		}
	case cachePutIfVersion, cacheDeleteIf:
		var ok bool
		if st, ok = st.bindVersion(in.version); !ok {
			return st, false
		}
	}
	if in.kind == cacheDeleteIf {
		return st.deleted(0, false), true
	}
	return st.setTo(in.value, 0, false), true
}

func describeRegister(state any) string {
	st := state.(register)
	switch {
	case !st.present:
		return fmt.Sprintf("absent (next version ≥ %d)", st.next)
	case !st.bound:
		return fmt.Sprintf("%s at a version ≥ %d not yet named", st.value, st.next)
	}
	return fmt.Sprintf("%s at %d", st.value, st.version)
}

func describeCacheOperation(input, output any) string {
	in, out := input.(cacheInput), output.(cacheOutput)
	var call string
	switch in.kind {
	case cacheGet:
		via := ""
		if in.via != "" {
			via = " via " + in.via
		}
		if !out.found {
			return fmt.Sprintf("get(%s)%s -> absent", in.key, via)
		}
		return fmt.Sprintf("get(%s)%s -> %s at %d", in.key, via, out.value, out.version)
	case cachePut, cachePutIfAbsent:
		call = fmt.Sprintf("%s(%s, %s)", in.kind, in.key, in.value)
	case cachePutIfVersion:
		call = fmt.Sprintf("%s(%s, %d, %s)", in.kind, in.key, in.version, in.value)
	case cacheDeleteIf:
		call = fmt.Sprintf("%s(%s, %d)", in.kind, in.key, in.version)
	}
	switch out.outcome {
	case written:
		prev := ""
		if out.hadPrev {
			prev = ", was " + out.prev
		}
		return fmt.Sprintf("%s -> applied at %d%s", call, out.version, prev)
	case refused:
		if out.present {
			return fmt.Sprintf("%s -> refused (%s), at %d", call, out.reason, out.version)
		}
		return fmt.Sprintf("%s -> refused (%s), absent", call, out.reason)
	}
	return call + " -> unknown"
}
