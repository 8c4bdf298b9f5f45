package lanes

import "testing"

func TestSelectorPolicies(t *testing.T) {
	tests := []struct {
		name       string
		give       *Selector
		subs       []uint64 // subscription ids, all on connection 7
		wantSame   bool     // every subscription on one lane
		wantSpread bool     // more than one lane used
	}{
		{name: "connection hash keeps a connection together", give: &Selector{Lanes: 4, Policy: SelectConnectionHash}, subs: []uint64{1, 2, 3, 4, 5, 6, 7, 8}, wantSame: true},
		{name: "single writer per conn overrides the policy", give: &Selector{Lanes: 4, Policy: SelectSubscriberHash, SinglePer: true}, subs: []uint64{1, 2, 3, 4, 5, 6, 7, 8}, wantSame: true},
		{name: "subscriber hash spreads", give: &Selector{Lanes: 4, Policy: SelectSubscriberHash}, subs: []uint64{1, 2, 3, 4, 5, 6, 7, 8}, wantSpread: true},
		{name: "auto spreads like subscriber hash", give: &Selector{Lanes: 4, Policy: SelectAuto}, subs: []uint64{1, 2, 3, 4, 5, 6, 7, 8}, wantSpread: true},
		{name: "round robin spreads", give: &Selector{Lanes: 4, Policy: SelectRoundRobin}, subs: []uint64{1, 1, 1, 1}, wantSpread: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			used := map[int]bool{}
			for _, id := range tt.subs {
				lane := tt.give.Select(id, 7)
				if lane < 0 || lane >= tt.give.Lanes {
					t.Fatalf("Select(%d) = %d, outside [0, %d)", id, lane, tt.give.Lanes)
				}
				used[lane] = true
			}
			if tt.wantSame && len(used) != 1 {
				t.Fatalf("lanes used = %v, want one", used)
			}
			if tt.wantSpread && len(used) < 2 {
				t.Fatalf("lanes used = %v, want several", used)
			}
		})
	}
}

func TestSubscriberHashIsStable(t *testing.T) {
	s := Selector{Lanes: 4}
	for id := uint64(0); id < 100; id++ {
		if a, b := s.Select(id, 1), s.Select(id, 2); a != b {
			t.Fatalf("subscription %d: lane %d on conn 1, %d on conn 2; subscriber hash must ignore the connection", id, a, b)
		}
	}
}

func TestEgressShareAndOversizeRule(t *testing.T) {
	b := NewConnBudget(1000)
	notified := 0
	e1 := b.NewEgress(func() { notified++ })
	e2 := b.NewEgress(nil)
	if got := b.Share(); got != 500 {
		t.Fatalf("share with 2 subscriptions = %d, want 500", got)
	}
	if !e1.TryTake(400) {
		t.Fatal("400 of a 500 share refused")
	}
	if e1.TryTake(200) {
		t.Fatal("600 of a 500 share accepted")
	}
	e1.Return(400)
	if notified != 1 {
		t.Fatalf("waiting subscription notified %d times after bytes came back, want 1", notified)
	}
	// Oversize rule: a frame larger than the share goes when nothing is in flight.
	if !e2.TryTake(5000) {
		t.Fatal("oversize frame refused with nothing in flight")
	}
	if e2.TryTake(1) {
		t.Fatal("a frame accepted behind an oversize one")
	}
	e2.Close()
	if got := b.Share(); got != 1000 {
		t.Fatalf("share after one subscription left = %d, want 1000", got)
	}
}
