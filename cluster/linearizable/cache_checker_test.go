package linearizable_test

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

// The cache model against hand-made histories: each passes a correct one
// and flags the same one corrupted. Pure and fast: no processes.

func cacheOp(client int, in cacheInput, out cacheOutput, call, ret int64) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret}
}

func getIn(key string) cacheInput { return cacheInput{kind: cacheGet, key: key} }
func putIn(kind cacheOpKind, key, value string, version uint64) cacheInput {
	return cacheInput{kind: kind, key: key, value: value, version: version}
}
func deleteIfIn(key string, version uint64) cacheInput {
	return cacheInput{kind: cacheDeleteIf, key: key, version: version}
}

func got(value string, version uint64) cacheOutput { return getOutput(true, value, version) }

var absent = getOutput(false, "", 0)

func appliedAt(version uint64) cacheOutput { return cacheOutput{outcome: written, version: version} }
func replacedAt(version uint64, prev string) cacheOutput {
	return cacheOutput{outcome: written, version: version, hadPrev: true, prev: prev}
}
func refusedPresent(version uint64) cacheOutput {
	return cacheOutput{outcome: refused, version: version, present: true, reason: refusedCondition}
}

var (
	refusedAbsent = cacheOutput{outcome: refused, reason: refusedCondition}
	unknownOut    = cacheOutput{outcome: unknown}
)

func checkCache(t *testing.T, name string, ops []porcupine.Operation) porcupine.CheckResult {
	t.Helper()
	res, _ := checkModel(cacheModel(), closePending(ops), checkTimeout, html(t, name))
	return res
}

// goodCache is linearizable: two clients race put-if-absent on k (the
// loser is told the winner's version), a put-if at that version, a put of
// unknown outcome that landed (a later get names its version), a
// delete-if, and on key j, at the same versions' times, writes that would
// be illegal on k: each key is judged alone.
func goodCache() []porcupine.Operation {
	return []porcupine.Operation{
		cacheOp(0, putIn(cachePutIfAbsent, "k", "a", 0), appliedAt(3), ms(0), ms(10)),
		cacheOp(1, putIn(cachePutIfAbsent, "k", "b", 0), refusedPresent(3), ms(2), ms(12)),
		cacheOp(2, getIn("k"), got("a", 3), ms(13), ms(14)),
		cacheOp(1, putIn(cachePutIfVersion, "k", "c", 3), replacedAt(7, "a"), ms(15), ms(20)),
		cacheOp(0, putIn(cachePut, "k", "d", 0), unknownOut, ms(21), pendingReturn),
		cacheOp(2, getIn("k"), got("d", 9), ms(30), ms(31)),
		cacheOp(1, putIn(cachePutIfVersion, "k", "e", 7), refusedPresent(9), ms(32), ms(33)),
		cacheOp(1, deleteIfIn("k", 9), replacedAt(11, "d"), ms(34), ms(35)),
		cacheOp(2, getIn("k"), absent, ms(36), ms(37)),
		cacheOp(0, deleteIfIn("k", 9), refusedAbsent, ms(38), ms(39)),
		cacheOp(0, putIn(cachePutIfAbsent, "k", "f", 0), appliedAt(12), ms(40), ms(41)),

		cacheOp(3, putIn(cachePut, "j", "x", 0), appliedAt(2), ms(0), ms(1)),
		cacheOp(3, putIn(cachePut, "j", "y", 0), replacedAt(8, "x"), ms(16), ms(17)),
		cacheOp(3, getIn("j"), got("y", 8), ms(36), ms(37)),
	}
}

func TestCacheCheckerAcceptsLinearizableHistory(t *testing.T) {
	if res := checkCache(t, "good", goodCache()); res != porcupine.Ok {
		t.Fatalf("a linearizable cache history: %s, want Ok", res)
	}
	if parts := partitionByKey(goodCache()); len(parts) != 2 || len(parts[0]) != 3 || len(parts[1]) != 11 {
		t.Errorf("partitioned by key: %d parts, want j's 3 operations and k's 11", len(parts))
	}
}

// TestCacheCheckerFlagsStaleGet: a get begun after a put-if returned
// that shows the value it replaced; the same get begun before that put
// returned is linearizable.
func TestCacheCheckerFlagsStaleGet(t *testing.T) {
	ops := []porcupine.Operation{
		cacheOp(0, putIn(cachePut, "k", "a", 0), appliedAt(0), ms(0), ms(10)),
		cacheOp(0, putIn(cachePutIfVersion, "k", "b", 0), replacedAt(5, "a"), ms(11), ms(20)),
		cacheOp(1, getIn("k"), got("a", 0), ms(21), ms(22)),
	}
	if res := checkCache(t, "stale-get", ops); res != porcupine.Illegal {
		t.Errorf("a get after the put-if returned that shows the old value: %s, want Illegal", res)
	}
	ops[2] = cacheOp(1, getIn("k"), got("a", 0), ms(15), ms(22))
	if res := checkCache(t, "concurrent-get", ops); res != porcupine.Ok {
		t.Errorf("the same get, concurrent with the put-if: %s, want Ok", res)
	}
	// The right value at a version other than its write's.
	ops[2] = cacheOp(1, getIn("k"), got("b", 4), ms(21), ms(22))
	if res := checkCache(t, "wrong-version", ops); res != porcupine.Illegal {
		t.Errorf("a get of b at 4 (b was written at 5): %s, want Illegal", res)
	}
}

// TestCacheCheckerFlagsPutIfThatShouldHaveBeenRefused: a put-if-absent
// applied on a key an acknowledged put had made present, and a put-if at
// a version another put had already replaced.
func TestCacheCheckerFlagsPutIfThatShouldHaveBeenRefused(t *testing.T) {
	absentOps := []porcupine.Operation{
		cacheOp(0, putIn(cachePut, "k", "a", 0), appliedAt(0), ms(0), ms(10)),
		cacheOp(1, putIn(cachePutIfAbsent, "k", "b", 0), appliedAt(4), ms(11), ms(20)),
	}
	if res := checkCache(t, "if-absent-applied", absentOps); res != porcupine.Illegal {
		t.Errorf("put-if-absent applied on a present key: %s, want Illegal", res)
	}
	absentOps[1] = cacheOp(1, putIn(cachePutIfAbsent, "k", "b", 0), refusedPresent(0), ms(11), ms(20))
	if res := checkCache(t, "if-absent-refused", absentOps); res != porcupine.Ok {
		t.Errorf("put-if-absent refused on a present key: %s, want Ok", res)
	}

	versionOps := []porcupine.Operation{
		cacheOp(0, putIn(cachePut, "k", "a", 0), appliedAt(0), ms(0), ms(10)),
		cacheOp(0, putIn(cachePut, "k", "b", 0), replacedAt(3, "a"), ms(11), ms(20)),
		cacheOp(1, putIn(cachePutIfVersion, "k", "c", 0), replacedAt(6, "b"), ms(21), ms(30)),
	}
	if res := checkCache(t, "if-version-applied", versionOps); res != porcupine.Illegal {
		t.Errorf("put-if at version 0 applied when the key was at 3: %s, want Illegal", res)
	}
	versionOps[2] = cacheOp(1, putIn(cachePutIfVersion, "k", "c", 0), refusedPresent(3), ms(21), ms(30))
	if res := checkCache(t, "if-version-refused", versionOps); res != porcupine.Ok {
		t.Errorf("put-if at version 0 refused at 3: %s, want Ok", res)
	}
	// A refusal that says the key was at the version expected.
	versionOps[2] = cacheOp(1, putIn(cachePutIfVersion, "k", "c", 3), refusedPresent(3), ms(21), ms(30))
	if res := checkCache(t, "if-version-wrongly-refused", versionOps); res != porcupine.Illegal {
		t.Errorf("put-if at 3 refused naming version 3: %s, want Illegal", res)
	}
	// A delete-if at a replaced version, applied.
	versionOps[2] = cacheOp(1, deleteIfIn("k", 0), replacedAt(6, "b"), ms(21), ms(30))
	if res := checkCache(t, "delete-if-applied", versionOps); res != porcupine.Illegal {
		t.Errorf("delete-if at version 0 applied when the key was at 3: %s, want Illegal", res)
	}
}

// TestCacheCheckerFlagsVersionsThatDoNotGrow: a write applied at a
// version not past the key's, directly and through a write of unknown
// outcome whose version a get names.
func TestCacheCheckerFlagsVersionsThatDoNotGrow(t *testing.T) {
	ops := []porcupine.Operation{
		cacheOp(0, putIn(cachePut, "k", "a", 0), appliedAt(5), ms(0), ms(10)),
		cacheOp(0, putIn(cachePut, "k", "b", 0), replacedAt(5, "a"), ms(11), ms(20)),
	}
	if res := checkCache(t, "same-version", ops); res != porcupine.Illegal {
		t.Errorf("two writes at version 5: %s, want Illegal", res)
	}
	ops = []porcupine.Operation{
		cacheOp(0, putIn(cachePut, "k", "a", 0), appliedAt(5), ms(0), ms(10)),
		cacheOp(0, deleteIfIn("k", 5), replacedAt(8, "a"), ms(11), ms(20)),
		cacheOp(1, putIn(cachePut, "k", "b", 0), unknownOut, ms(21), pendingReturn),
		cacheOp(2, getIn("k"), got("b", 7), ms(30), ms(31)),
	}
	if res := checkCache(t, "unknown-below", ops); res != porcupine.Illegal {
		t.Errorf("an unknown put named at 7, after a delete at 8: %s, want Illegal", res)
	}
	ops[3] = cacheOp(2, getIn("k"), got("b", 9), ms(30), ms(31))
	if res := checkCache(t, "unknown-above", ops); res != porcupine.Ok {
		t.Errorf("an unknown put named at 9, after a delete at 8: %s, want Ok", res)
	}
	// A put of unknown outcome that never happened leaves the key absent.
	ops[3] = cacheOp(2, getIn("k"), absent, ms(30), ms(31))
	if res := checkCache(t, "unknown-not-applied", ops); res != porcupine.Ok {
		t.Errorf("an unknown put that did not apply: %s, want Ok", res)
	}
}
