package actors_test

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getfelix/felix-go/actors"
)

const gib = int64(1) << 30

func TestNewByteBudgetNonPositiveIsUnlimited(t *testing.T) {
	tests := []struct {
		give int64
	}{
		{give: 0},
		{give: -1},
	}
	for _, tt := range tests {
		b := actors.NewByteBudget(tt.give)
		if b != nil {
			t.Errorf("NewByteBudget(%d) = %p, want nil (unlimited)", tt.give, b)
		}
		// A nil budget is usable without checks.
		if !b.TryAcquire(1 << 62) {
			t.Errorf("NewByteBudget(%d).TryAcquire(1<<62) = false, want true", tt.give)
		}
		b.Release(1 << 62)
		if used, limit := b.Used(), b.Limit(); used != 0 || limit != 0 {
			t.Errorf("NewByteBudget(%d): Used() = %d, Limit() = %d, want 0, 0", tt.give, used, limit)
		}
	}
}

func TestByteBudgetAbove4GiB(t *testing.T) {
	b := actors.NewByteBudget(5 * gib)
	if got := b.Limit(); got != 5*gib {
		t.Fatalf("NewByteBudget(5 GiB).Limit() = %d, want %d", got, 5*gib)
	}
	tests := []struct {
		name     string
		acquire  int64 // TryAcquire this many bytes, or
		release  int64 // Release this many
		wantOK   bool
		wantUsed int64
	}{
		{name: "3 GiB", acquire: 3 * gib, wantOK: true, wantUsed: 3 * gib},
		{name: "2 GiB more, exactly the limit", acquire: 2 * gib, wantOK: true, wantUsed: 5 * gib},
		{name: "one byte past the limit", acquire: 1, wantOK: false, wantUsed: 5 * gib},
		{name: "release 1 GiB", release: gib, wantOK: true, wantUsed: 4 * gib},
		{name: "2 GiB does not fit in 1", acquire: 2 * gib, wantOK: false, wantUsed: 4 * gib},
		{name: "1 GiB fits", acquire: gib, wantOK: true, wantUsed: 5 * gib},
		{name: "release everything", release: 5 * gib, wantOK: true, wantUsed: 0},
	}
	for _, tt := range tests {
		ok := true
		if tt.acquire != 0 {
			ok = b.TryAcquire(tt.acquire)
		} else {
			b.Release(tt.release)
		}
		if ok != tt.wantOK || b.Used() != tt.wantUsed {
			t.Errorf("5 GiB budget, %s: ok = %v, Used() = %d, want ok = %v, Used() = %d", tt.name, ok, b.Used(), tt.wantOK, tt.wantUsed)
		}
	}
}

func TestByteBudgetConcurrentAcquireNeverOvershoots(t *testing.T) {
	const limit = 20_000
	b := actors.NewByteBudget(limit)
	var (
		wg  sync.WaitGroup
		got atomic.Int64
	)
	for range 8 {
		wg.Go(func() {
			for b.TryAcquire(1) {
				got.Add(1)
			}
		})
	}
	wg.Wait()
	if got.Load() != limit || b.Used() != limit {
		t.Errorf("8 goroutines taking 1 byte until refused from a %d-byte budget: took %d, Used() = %d, want %d, %d", limit, got.Load(), b.Used(), limit, limit)
	}
}

func TestMailboxByteBoundAbove4GiB(t *testing.T) {
	budget := actors.NewByteBudget(5 * gib)
	tests := []struct {
		name string
		cfg  actors.MailboxConfig
	}{
		{name: "MaxBytes", cfg: actors.MailboxConfig{Capacity: 10, MaxBytes: 5 * gib}},
		{name: "Budget", cfg: actors.MailboxConfig{Capacity: 10, Budget: budget}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mb := actors.NewMailbox(tt.cfg)
			give := []int64{2 * gib, 2 * gib, 2 * gib}
			want := []actors.PostResult{actors.Posted, actors.Posted, actors.Dropped}
			var got []actors.PostResult
			for i, size := range give {
				got = append(got, mb.TryPost(&sized{n: i, bytes: size}, 0))
			}
			if !slices.Equal(got, want) {
				t.Errorf("5 GiB %s, three 2 GiB posts: %v, want %v", tt.name, resultNames(got), resultNames(want))
			}
			if got, want := mb.Bytes(), 4*gib; got != want {
				t.Errorf("5 GiB %s: Bytes() = %d, want %d", tt.name, got, want)
			}
			if got := mb.ByteDropped(); got != 1 {
				t.Errorf("5 GiB %s: ByteDropped() = %d, want 1", tt.name, got)
			}
			mb.Close()
			if got := budget.Used(); got != 0 {
				t.Errorf("5 GiB %s: budget Used() after Close = %d, want 0", tt.name, got)
			}
		})
	}
}

func TestByteBudgetSharedByTwoMailboxes(t *testing.T) {
	system := newSystem(t)
	budget := actors.NewByteBudget(100)
	cfg := actors.MailboxConfig{Capacity: 10, Policy: actors.DropNew, Budget: budget}
	a := startBusy(t, system, cfg) // both park in d0, which weighs nothing
	b := startBusy(t, system, cfg)

	steps := []struct {
		name     string
		to       *probe
		give     *sized
		want     actors.PostResult
		wantUsed int64
	}{
		{name: "A takes 60", to: a, give: &sized{n: 1, bytes: 60}, want: actors.Posted, wantUsed: 60},
		{name: "A takes the last 40", to: a, give: &sized{n: 2, bytes: 40}, want: actors.Posted, wantUsed: 100},
		{name: "A is refused 1", to: a, give: &sized{n: 3, bytes: 1}, want: actors.Dropped, wantUsed: 100},
		// An empty queue always takes one message, even past the budget
		// (the oversize rule), so no subscriber starves.
		{name: "empty B takes 1 past the budget", to: b, give: &sized{n: 1, bytes: 1}, want: actors.Posted, wantUsed: 101},
		{name: "non-empty B is refused 1", to: b, give: &sized{n: 2, bytes: 1}, want: actors.Dropped, wantUsed: 101},
	}
	for _, st := range steps {
		if r := st.to.mb.TryPost(st.give, 0); r != st.want || budget.Used() != st.wantUsed {
			t.Errorf("%s: TryPost = %s, Used() = %d, want %s, %d", st.name, resultName(r), budget.Used(), resultName(st.want), st.wantUsed)
		}
	}
	for name, p := range map[string]*probe{"A": a, "B": b} {
		if d, bd := p.mb.Dropped(), p.mb.ByteDropped(); d != 1 || bd != 1 {
			t.Errorf("mailbox %s: Dropped() = %d, ByteDropped() = %d, want 1, 1 (refused by the budget)", name, d, bd)
		}
	}

	// A mailbox returns a message's bytes before delivering it.
	a.gate.open()
	a.expect(t, ds(0, 1, 2)...)
	if got, want := budget.Used(), int64(1); got != want {
		t.Errorf("Used() after A drained = %d, want %d (B still holds 1)", got, want)
	}
	b.gate.open()
	b.expect(t, ds(0, 1)...)
	if got := budget.Used(); got != 0 {
		t.Errorf("Used() after both drained = %d, want 0", got)
	}
	a.expectDrained(t)
	b.expectDrained(t)
	if got := budget.Used(); got != 0 {
		t.Errorf("Used() after the sentinels = %d, want 0", got)
	}
}

func TestByteBudgetReturnedByEvictionAndClose(t *testing.T) {
	budget := actors.NewByteBudget(100)
	a := actors.NewMailbox(actors.MailboxConfig{Capacity: 10, Policy: actors.DropOld, Budget: budget})
	b := actors.NewMailbox(actors.MailboxConfig{Capacity: 10, Policy: actors.DropNew, Budget: budget})

	steps := []struct {
		name     string
		to       *actors.Mailbox
		give     int64
		want     actors.PostResult
		wantUsed int64
	}{
		{name: "A takes 30", to: a, give: 30, want: actors.Posted, wantUsed: 30},
		{name: "A takes 30 more", to: a, give: 30, want: actors.Posted, wantUsed: 60},
		{name: "B takes 30", to: b, give: 30, want: actors.Posted, wantUsed: 90},
		// 90 + 20 > 100: A evicts its oldest 30 and then fits.
		{name: "A evicts to take 20", to: a, give: 20, want: actors.PostedEvicting, wantUsed: 80},
		// 80 + 80 > 100 even after one eviction: A evicts both its
		// messages, then takes 80 into an empty queue past the budget.
		{name: "A evicts everything to take 80", to: a, give: 80, want: actors.PostedEvicting, wantUsed: 110},
	}
	for i, st := range steps {
		if r := st.to.TryPost(&sized{n: i, bytes: st.give}, 0); r != st.want || budget.Used() != st.wantUsed {
			t.Errorf("%s: TryPost = %s, Used() = %d, want %s, %d", st.name, resultName(r), budget.Used(), resultName(st.want), st.wantUsed)
		}
	}
	if got, want := a.Evicted(), uint64(3); got != want {
		t.Errorf("A: Evicted() = %d, want %d", got, want)
	}
	a.Close()
	if got, want := budget.Used(), int64(30); got != want {
		t.Errorf("Used() after closing A = %d, want %d (B's)", got, want)
	}
	b.Close()
	if got := budget.Used(); got != 0 {
		t.Errorf("Used() after closing both = %d, want 0", got)
	}
}

// A Block sender refused by the shared budget must wake when the budget
// frees, not only when its own mailbox delivers: the doc promises it parks
// "until the message fits".
func TestMailboxBlockWakesWhenSharedBudgetFrees(t *testing.T) {
	const wait = 2 * time.Second
	system := newSystem(t)
	budget := actors.NewByteBudget(100)
	a := startBusy(t, system, actors.MailboxConfig{Capacity: 10, Policy: actors.Block, Budget: budget})
	b := actors.NewMailbox(actors.MailboxConfig{Capacity: 10, Budget: budget})

	if r := a.mb.TryPost(&sized{n: 1, bytes: 1}, 0); r != actors.Posted {
		t.Fatalf("TryPost(1 byte) into empty A = %s, want Posted", resultName(r))
	}
	if r := b.TryPost(&sized{n: 1, bytes: 99}, 0); r != actors.Posted {
		t.Fatalf("TryPost(99 bytes) into empty B = %s, want Posted", resultName(r))
	}
	res := make(chan actors.PostResult, 1)
	go func() { res <- a.mb.TryPost(&sized{n: 2, bytes: 50}, wait) }()
	waitParked(t) // 100 + 50 > 100: parked on the budget

	start := time.Now()
	b.Close() // returns B's 99 bytes: Used() = 1, and 1 + 50 fits
	r := recv(t, res, "the parked sender")
	if r != actors.Posted {
		t.Errorf("Block TryPost(50 bytes, %v) parked on the shared budget, then the budget freed to %d of 100: got %s after %v, want Posted promptly",
			wait, budget.Used(), resultName(r), time.Since(start))
	}

	a.gate.open()
	a.expect(t, ds(0, 1)...)
	if r == actors.Posted {
		a.expect(t, "d2")
	}
}
