package streams

import (
	"testing"

	"github.com/getfelix/felix-go/actors"
)

func env(size int) *Envelope { return NewEnvelope([][]byte{make([]byte, size)}) }

func TestRingBounds(t *testing.T) {
	tests := []struct {
		name        string
		give        ring
		push        []int // payload sizes, one record each
		wantRecords int
		wantBytes   int64
	}{
		{name: "record bound keeps the newest", give: ring{maxRecords: 3}, push: []int{1, 1, 1, 1, 1}, wantRecords: 3, wantBytes: 3},
		{name: "byte bound keeps the newest", give: ring{maxRecords: 100, maxBytes: 10}, push: []int{4, 4, 4, 4}, wantRecords: 2, wantBytes: 8},
		{name: "an oversize batch is kept alone", give: ring{maxRecords: 100, maxBytes: 10}, push: []int{4, 40}, wantRecords: 1, wantBytes: 40},
		{name: "zero records keeps nothing", give: ring{}, push: []int{1, 2}, wantRecords: 0, wantBytes: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.give
			for _, n := range tt.push {
				r.push(env(n))
			}
			if r.records != tt.wantRecords || r.bytes != tt.wantBytes {
				t.Fatalf("after pushing %v: %d records, %d bytes; want %d, %d", tt.push, r.records, r.bytes, tt.wantRecords, tt.wantBytes)
			}
		})
	}
}

// The shared total (replay_ring_max_bytes_total) is enforced by each ring
// evicting its own oldest: a busy ring cannot take another ring's history.
func TestRingTotalIsShared(t *testing.T) {
	total := actors.NewByteBudget(100)
	quiet := ring{maxRecords: 1000, total: total}
	busy := ring{maxRecords: 1000, total: total}
	quiet.push(env(30))
	for range 50 {
		busy.push(env(10))
	}
	if quiet.bytes != 30 {
		t.Fatalf("quiet ring lost history to a busy one: %d bytes, want 30", quiet.bytes)
	}
	if busy.bytes != 70 {
		t.Fatalf("busy ring holds %d bytes, want the 70 the total leaves it", busy.bytes)
	}
	if used := total.Used(); used != 100 {
		t.Fatalf("total used = %d, want 100", used)
	}
}
