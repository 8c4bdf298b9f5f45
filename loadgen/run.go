package loadgen

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

const (
	// warmBit marks a warmup message's timestamp: counted for accounting,
	// left out of rates and latencies.
	warmBit = uint64(1) << 63
	// tsBytes is the timestamp's size.
	tsBytes = 8
	// settleAfter ends the wait for deliveries once nothing arrived for this
	// long after publishing ended (a lossy run never reaches its total).
	settleAfter = 2 * time.Second
	// settleAfterPublisher is settleAfter for a publisher in another
	// process (Config.SubscribeOnly): the wait cannot know when it stopped
	// publishing, so a pause of the publisher on a busy machine must not
	// end it; a lossy run pays this much wall time at its end (no CPU).
	settleAfterPublisher = 10 * time.Second
	// closeTimeout bounds each client's goodbye at the end of a run, so a
	// wedged peer cannot stretch the run past its report.
	closeTimeout = 3 * time.Second
)

// sub is one subscription and the goroutine reading it.
type sub struct {
	sub  *client.Subscription
	hist *hdrhistogram.Histogram // measured latencies (ns); read after the reader exits

	warm, measured atomic.Int64
	first, last    atomic.Int64 // ns since base of the first and the latest measured arrival
	foreign        atomic.Int64 // payloads too short to be ours
	err            error
}

// loop is one publishing loop: one publish awaiting its answer at a time.
type loop struct {
	hist *hdrhistogram.Histogram // ack latencies (ns) of measured publishes
}

// run is one Run in flight. The goroutines it starts (progress, readers,
// publishing loops) all end before Run returns.
type run struct {
	cfg    Config
	t      *target
	base   time.Time
	stream client.Stream

	pubs     []*client.Client
	subConns []*client.Client
	subs     []*sub
	// subsView is subs for the progress goroutine, republished on each append.
	subsView atomic.Pointer[[]*sub]
	loops    []*loop
	subWG    sync.WaitGroup
	// subsCtx ends the readers' NextBatch waits when the run closes.
	subsCtx  context.Context
	stopSubs context.CancelFunc

	phase                  atomic.Value // Phase, for progress reports
	published, measuredPub atomic.Int64
	warmPublished          atomic.Int64
	refused, inDoubt       atomic.Int64
	t0, pubEnd             time.Duration // since base
	drops0                 int64
	dropsKnown             bool
	dropsErr               error
	timedOut, interrupted  bool
}

func newRun(cfg Config, t *target) *run {
	r := &run{cfg: cfg, t: t, base: time.Now()}
	r.subsCtx, r.stopSubs = context.WithCancel(context.Background())
	r.phase.Store(PhaseConnecting)
	name := cfg.Stream
	if name == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		name = "bench-" + hex.EncodeToString(b[:])
	}
	r.stream = client.Stream{Name: name}
	return r
}

// execute connects, subscribes, warms up, measures and waits for the
// deliveries. It returns early, with what it has, when ctx ends.
func (r *run) execute(ctx context.Context) error {
	if err := r.connect(ctx); err != nil {
		return err
	}
	if r.cfg.Ready != nil {
		r.cfg.Ready()
	}
	if r.cfg.SubscribeOnly {
		r.awaitPublisher(ctx)
		return nil
	}
	if r.cfg.Warmup > 0 {
		r.phase.Store(PhaseWarmup)
		if err := r.publishPhase(ctx, int64(r.cfg.Warmup), 0, true); err != nil {
			return err
		}
		r.waitDeliveries(ctx, r.warmPublished.Load(), func() int64 {
			var n int64
			for _, s := range r.subs {
				n += s.warm.Load()
			}
			return n
		})
		if ctx.Err() != nil {
			return nil
		}
	}

	r.phase.Store(PhaseMeasuring)
	r.t0 = time.Since(r.base)
	err := r.publishPhase(ctx, int64(r.cfg.Count), r.cfg.Duration, false)
	r.pubEnd = time.Since(r.base)
	if err != nil {
		return err
	}
	r.phase.Store(PhaseDraining)
	r.waitDeliveries(ctx, r.published.Load(), r.deliveredTotal)
	return nil
}

// awaitPublisher waits for the deliveries of a publisher in another
// process: as long as ctx allows for the first, then until every one of
// (Warmup + Count) x Fanout arrived or none did for settleAfter.
func (r *run) awaitPublisher(ctx context.Context) {
	r.phase.Store(PhaseMeasuring)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for r.deliveredTotal() == 0 {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
	r.waitDeliveries(ctx, int64(r.cfg.Warmup+r.cfg.Count), r.deliveredTotal)
}

// connect dials every connection, creates a durable stream, subscribes,
// and reads the drop counters the run's drops are counted from.
func (r *run) connect(ctx context.Context) error {
	cfg := r.cfg
	// First: on a cluster, creating the stream tells which member every
	// other connection must go to.
	if cfg.Durable {
		if err := r.createDurable(ctx); err != nil {
			return err
		}
	}
	for range cfg.SubConns {
		c, err := r.dial(ctx)
		if err != nil {
			return err
		}
		r.subConns = append(r.subConns, c)
	}
	for i := range cfg.Fanout {
		// Batches: the reader takes each batch on its own goroutine, as a
		// consumer that counts or copies would, with no hop per event.
		s, err := r.subConns[i%len(r.subConns)].Subscribe(ctx, r.stream, client.SubscribeOptions{Batches: true})
		if err != nil {
			return fmt.Errorf("subscribe %d to %s: %w", i, r.stream.Name, err)
		}
		bs := &sub{sub: s, hist: newHist()}
		r.subs = append(r.subs, bs)
		view := r.subs
		r.subsView.Store(&view)
		r.subWG.Add(1)
		go r.read(bs)
	}
	for range r.publishers() {
		c, err := r.dial(ctx)
		if err != nil {
			return err
		}
		r.pubs = append(r.pubs, c)
	}
	for range r.publishers() * cfg.Inflight {
		r.loops = append(r.loops, &loop{hist: newHist()})
	}
	if r.t.drops != nil {
		n, err := r.t.drops(ctx)
		if err != nil {
			r.dropsErr = err
		} else {
			r.drops0, r.dropsKnown = n, true
		}
	}
	return nil
}

// publishers is the publishing connections this process makes: none when
// another process publishes.
func (r *run) publishers() int {
	if r.cfg.SubscribeOnly {
		return 0
	}
	return r.cfg.Publishers
}

func (r *run) dial(ctx context.Context) (*client.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, r.cfg.ConnectTimeout)
	defer cancel()
	c, err := client.Dial(dctx, r.t.addr, r.t.opts)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &DialError{Addr: r.t.addr, Err: err}
	}
	return c, nil
}

// createDurable creates the stream as a durable one, with cfg.Replicas, on
// a connection of its own. Against a running broker it then moves the run
// to the owner of the stream's shard: in a cluster that is one member (a
// replicated shard's raft leader), and the others refuse its publishes.
func (r *run) createDurable(ctx context.Context) error {
	c, err := r.dial(ctx)
	if err != nil {
		return err
	}
	defer closeClient(c)
	if _, err := c.CreateStream(ctx, r.stream, client.StreamConfig{Durable: true, Replicas: r.cfg.Replicas}); err != nil {
		return fmt.Errorf("create durable stream %s: %w", r.stream.Name, err)
	}
	if r.cfg.Addr == "" {
		return nil // the embedded broker owns every shard
	}
	owner, err := r.owner(ctx, c)
	if err != nil {
		return err
	}
	if owner != "" {
		r.t.addr = owner
	}
	return nil
}

// ownerPoll is how often owner asks again while the shard has no owner
// (a replicated shard elects its leader within a second or two).
const ownerPoll = 50 * time.Millisecond

// owner is the address of the member that owns shard 0 of the run's
// stream, as the broker at c says ("": that broker), waiting up to
// ConnectTimeout for one to be available.
func (r *run) owner(ctx context.Context, c *client.Client) (string, error) {
	wctx, cancel := context.WithTimeout(ctx, r.cfg.ConnectTimeout)
	defer cancel()
	for {
		top, err := c.ShardOwners(wctx, r.stream)
		if err != nil {
			return "", fmt.Errorf("find the owner of %s: %w", r.stream.Name, err)
		}
		if o, ok := top.Owner(0); ok && o.Available {
			return o.Owner.Addr, nil
		}
		select {
		case <-time.After(ownerPoll):
		case <-wctx.Done():
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			return "", fmt.Errorf("shard 0 of %s has no owner available after %s", r.stream.Name, r.cfg.ConnectTimeout)
		}
	}
}

// read counts and times one subscription's deliveries until the run
// closes (subsCtx) or the subscription ends.
func (r *run) read(s *sub) {
	defer r.subWG.Done()
	for {
		events, err := s.sub.NextBatch(r.subsCtx)
		if err != nil {
			if r.subsCtx.Err() == nil {
				s.err = err
			}
			return
		}
		now := int64(time.Since(r.base))
		var warm, measured int64
		for _, ev := range events {
			if len(ev.Payload) < tsBytes {
				s.foreign.Add(1)
				continue
			}
			ts := binary.LittleEndian.Uint64(ev.Payload)
			if ts&warmBit != 0 {
				warm++
				continue
			}
			if !r.cfg.SubscribeOnly {
				record(s.hist, now-int64(ts)) // the same clock stamped it
			}
			measured++
		}
		s.warm.Add(warm)
		if measured > 0 {
			s.first.CompareAndSwap(0, now)
			s.last.Store(now)
			s.measured.Add(measured)
		}
	}
}

func (r *run) deliveredTotal() int64 {
	view := r.subsView.Load()
	if view == nil {
		return 0
	}
	var n int64
	for _, s := range *view {
		n += s.warm.Load() + s.measured.Load()
	}
	return n
}

// waitDeliveries waits until got() reaches published x fanout, nothing
// arrives for settleAfter (settleAfterPublisher for SubscribeOnly), or ctx
// ends.
func (r *run) waitDeliveries(ctx context.Context, published int64, got func() int64) {
	want := published * int64(r.cfg.Fanout)
	settle := settleAfter
	if r.cfg.SubscribeOnly {
		settle = settleAfterPublisher
	}
	last, lastChange := got(), time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		n := got()
		if n >= want {
			return
		}
		if n != last {
			last, lastChange = n, time.Now()
		} else if time.Since(lastChange) >= settle {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// publishPhase runs every publishing loop until total messages are
// published (total > 0) or for d. It returns the first error that is not
// the broker refusing a publish as overloaded (counted, and the loop goes
// on) or ctx's end (nil: the caller reports what it has).
func (r *run) publishPhase(ctx context.Context, total int64, d time.Duration, warm bool) error {
	batch := r.cfg.Batch
	var remaining atomic.Int64
	remaining.Store(total)
	start := time.Now()
	until := start.Add(d)
	claim := func() int {
		if d > 0 {
			if time.Now().Before(until) {
				return batch
			}
			return 0
		}
		for {
			left := remaining.Load()
			if left <= 0 {
				return 0
			}
			n := min(int64(batch), left)
			if remaining.CompareAndSwap(left, left-n) {
				return int(n)
			}
		}
	}
	interval := time.Duration(0)
	if r.cfg.Rate > 0 {
		interval = r.cfg.PaceInterval()
	}
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for i, l := range r.loops {
		c := r.pubs[i%len(r.pubs)]
		// Stagger the loops' schedules so together they send evenly.
		next := start.Add(interval * time.Duration(i) / time.Duration(len(r.loops)))
		wg.Go(func() {
			if err := r.publishLoop(pctx, c, l, claim, next, interval, warm); err != nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	if err := context.Cause(pctx); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

// publishLoop publishes the batches claim hands it, one at a time, on an
// absolute schedule of interval (0: unpaced), until claim says 0 or ctx ends.
func (r *run) publishLoop(ctx context.Context, c *client.Client, l *loop, claim func() int,
	next time.Time, interval time.Duration, warm bool) error {
	bufs := newPayloads(r.cfg.Batch, r.cfg.Payload)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		if interval > 0 {
			// Absolute schedule: a loop that fell behind catches up at once.
			if wait := time.Until(next); wait > 0 {
				timer.Reset(wait)
				select {
				case <-timer.C:
				case <-ctx.Done():
					return nil
				}
			}
			next = next.Add(interval)
		}
		n := claim()
		if n == 0 || ctx.Err() != nil {
			return nil
		}
		if err := r.publish(ctx, c, l, bufs[:n], warm); err != nil {
			if errors.Is(err, errCut) {
				return nil
			}
			return err
		}
	}
}

// errCut is publish saying ctx ended with a publish in flight.
var errCut = errors.New("loadgen: cut")

// publish stamps and publishes one batch and accounts for it.
func (r *run) publish(ctx context.Context, c *client.Client, l *loop, batch [][]byte, warm bool) error {
	n := int64(len(batch))
	sent := time.Since(r.base)
	ts := uint64(sent)
	if warm {
		ts |= warmBit
	}
	for _, b := range batch {
		binary.LittleEndian.PutUint64(b, ts)
	}
	opts := client.PublishOptions{Ack: r.cfg.Ack}
	var err error
	if r.cfg.Batch == 1 {
		err = c.Publish(ctx, r.stream, batch[0], opts)
	} else {
		err = c.PublishBatch(ctx, r.stream, batch, opts)
	}
	acked := time.Since(r.base)
	switch {
	case err == nil:
		r.published.Add(n)
		if warm {
			r.warmPublished.Add(n)
		} else {
			r.measuredPub.Add(n)
			record(l.hist, int64(acked-sent))
		}
	case errors.Is(err, wire.ErrOverloaded):
		r.refused.Add(n) // not published: the broker said so
	case ctx.Err() != nil:
		r.inDoubt.Add(n) // sent or not: the answer never came
		return errCut
	default:
		return fmt.Errorf("publish to %s after %d messages: %w", r.stream.Name, r.published.Load(), err)
	}
	return nil
}

// newPayloads makes one loop's batch of payloads: a readable filler after
// the timestamp, which publish rewrites for every batch.
func newPayloads(batch, size int) [][]byte {
	bufs := make([][]byte, batch)
	for i := range bufs {
		bufs[i] = make([]byte, size)
		for j := tsBytes; j < size; j++ {
			bufs[i][j] = 'a' + byte(j%26)
		}
	}
	return bufs
}

// progress calls cfg.Progress every ProgressEvery until the returned func
// is called.
func (r *run) progress() (stop func()) {
	if r.cfg.Progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		tick := time.NewTicker(ProgressEvery)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
			case <-done:
				return
			}
			r.cfg.Progress(Progress{
				Elapsed: time.Since(r.base), Phase: r.phase.Load().(Phase),
				Published: r.published.Load(), Delivered: r.deliveredTotal(),
			})
		}
	}()
	return func() { close(done); <-exited }
}

// close says goodbye to every connection, each within closeTimeout, and
// stops the subscription readers.
func (r *run) close() {
	var wg sync.WaitGroup
	closeAll := func(cs []*client.Client) {
		for _, c := range cs {
			wg.Go(func() { closeClient(c) })
		}
		wg.Wait()
	}
	closeAll(r.pubs)
	r.stopSubs()
	r.subWG.Wait()
	closeAll(r.subConns)
}

// closeClient says goodbye to c within closeTimeout.
func closeClient(c *client.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_ = c.Close(ctx)
}
