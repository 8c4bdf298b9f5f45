package producers

import (
	"errors"
	"testing"

	"github.com/getfelix/felix-go/metadata"
	"github.com/getfelix/felix-go/wire"
)

// TestCreate: an id is given out only once stored, a draw the store
// already holds is drawn again, a store's error is the caller's, and eight
// taken draws in a row give up.
func TestCreate(t *testing.T) {
	var r Registry
	r.Load([]metadata.ProducerDef{{ID: 1, Tenant: "a"}})
	if tenant, ok := r.Tenant(1); !ok || tenant != "a" {
		t.Fatalf("a loaded id: %q, %v", tenant, ok)
	}
	tries := 0
	id, err := r.Create("b", func(uint64) (bool, error) { tries++; return tries == 3, nil })
	if err != nil || tries != 3 {
		t.Fatalf("created after %d tries: %v", tries, err)
	}
	if tenant, ok := r.Tenant(id); !ok || tenant != "b" {
		t.Fatalf("the created id %d: %q, %v", id, tenant, ok)
	}
	broken := errors.New("disk full")
	if _, err := r.Create("b", func(uint64) (bool, error) { return false, broken }); !errors.Is(err, broken) {
		t.Fatalf("a store that fails: %v", err)
	}
	if _, err := r.Create("b", func(uint64) (bool, error) { return false, nil }); !errors.Is(err, wire.ErrInternal) {
		t.Fatalf("every draw taken: %v; want internal", err)
	}
	r.Add(42, "c")
	if tenant, ok := r.Tenant(42); !ok || tenant != "c" {
		t.Fatalf("an added id: %q, %v", tenant, ok)
	}
}
