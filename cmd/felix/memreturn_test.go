package main

import "testing"

// TestMemReturnerCheck: memory is returned only by an idle process (no
// collection since the last check) with enough at stake, and not again
// for the same heap.
func TestMemReturnerCheck(t *testing.T) {
	const mib = 1 << 20
	m := memReturner{last: memSample{gcCycles: 10, objects: 20 * mib}}
	steps := []struct {
		name string
		now  memSample
		want bool
	}{
		{"busy: a collection ran", memSample{gcCycles: 11, objects: 300 * mib}, false},
		{"idle with a heap grown by 300 MiB", memSample{gcCycles: 11, objects: 300 * mib}, true},
	}
	for _, s := range steps {
		if got := m.check(s.now); got != s.want {
			t.Fatalf("%s: check(%+v) = %v, want %v", s.name, s.now, got, s.want)
		}
	}
	m.returned(memSample{gcCycles: 12, objects: 250 * mib, free: 0})
	for _, s := range []struct {
		name string
		now  memSample
		want bool
	}{
		{"idle, the same heap as at the return", memSample{gcCycles: 12, objects: 251 * mib}, false},
		{"the runtime's own collection ran", memSample{gcCycles: 13, objects: 8 * mib, free: 240 * mib}, false},
		{"idle after it, 240 MiB free and not returned", memSample{gcCycles: 13, objects: 8 * mib, free: 240 * mib}, true},
	} {
		if got := m.check(s.now); got != s.want {
			t.Fatalf("%s: check(%+v) = %v, want %v", s.name, s.now, got, s.want)
		}
	}
	m.returned(memSample{gcCycles: 14, objects: 8 * mib})
	if m.check(memSample{gcCycles: 14, objects: 60 * mib, free: 10 * mib}) {
		t.Error("idle with 52 MiB grown and 10 MiB free: returned, want nothing under the 64 MiB at stake")
	}
}
