package actors

import (
	"fmt"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
)

// TestDirectoryPrunesStoppedActors: the entries of stopped actors are
// dropped as new ones come, even when nothing lists the directory; they
// used to stay until the tree was listed or /metrics scraped, so a broker
// nobody scraped kept one per connection and subscription it ever had.
func TestDirectoryPrunesStoppedActors(t *testing.T) {
	d := NewDirectory()
	live := NewMailbox(MailboxConfig{Capacity: 1})
	d.Add(&actor.PID{Id: "live"}, KindFeeder, live, nil)
	for i := range 100_000 {
		mb := NewMailbox(MailboxConfig{Capacity: 1})
		mb.Close() // the actor stopped
		d.Add(&actor.PID{Id: fmt.Sprint("gone-", i)}, KindFeeder, mb, nil)
	}
	if n := d.Len(); n > 2*minPruneAt {
		t.Fatalf("the directory holds %d entries after 100 000 actors came and stopped (1 alive), want at most %d", n, 2*minPruneAt)
	}
	if _, ok := d.Lookup("live"); !ok {
		t.Fatal("pruning dropped a live actor")
	}
}
