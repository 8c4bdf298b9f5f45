package streams

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestRetentionTickerNothingFiresAfterStop: the old
// timer re-armed itself with Reset from its own goroutine, racing the
// shard's Stop: a tick in progress during Stop scheduled another. Here a
// tick is in progress when Stop is called; Stop waits for it, and nothing
// fires after Stop returns.
func TestRetentionTickerNothingFiresAfterStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fires := 0
		entered, release := make(chan struct{}), make(chan struct{})
		tk := startRetentionTicker(time.Second, func() {
			fires++
			if fires == 1 {
				close(entered)
				<-release
			}
		})
		<-entered
		stopped := make(chan struct{})
		go func() { tk.Stop(); close(stopped) }()
		synctest.Wait()
		select {
		case <-stopped:
			t.Fatal("Stop returned while a tick was still running")
		default:
		}
		close(release)
		<-stopped
		time.Sleep(time.Minute)
		if fires != 1 {
			t.Fatalf("retention fired %d times; want 1 (none after Stop)", fires)
		}
	})
}

// TestSyncWaiterHandsBackInOrderAndStopsWithoutWaitingForTheDisk: batches
// come back in append order once their fsync completes; Stop does not wait
// for an fsync in progress, and nothing is sent after it returns.
func TestSyncWaiterHandsBackInOrderAndStopsWithoutWaitingForTheDisk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := newFakeLog(0)
		var sent []uint64
		w := startSyncWaiter(log, 4, func(msg any) { sent = append(sent, msg.(*durableDone).upTo) })
		w.wait(durableWait{upTo: 1})
		w.wait(durableWait{upTo: 2})
		w.wait(durableWait{upTo: 3})
		log.sync(2, nil) // the second is on disk before the first: still in order
		synctest.Wait()
		if len(sent) != 0 {
			t.Fatalf("sent %v before the first batch's fsync", sent)
		}
		log.sync(1, nil)
		synctest.Wait()
		if len(sent) != 2 || sent[0] != 1 || sent[1] != 2 {
			t.Fatalf("sent %v; want [1 2]", sent)
		}
		w.Stop() // batch 3's fsync never completes: Stop must not wait for it
		log.sync(3, nil)
		synctest.Wait()
		if len(sent) != 2 {
			t.Fatalf("sent %v after Stop", sent)
		}
	})
}
