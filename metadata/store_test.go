package metadata

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestStreamsSurviveReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	a := StreamDef{Tenant: "t", Namespace: "ns", Stream: "a", Shards: 4, Routing: "jump", RetentionBytes: 1 << 30, RetentionAge: time.Hour, CreatedAt: time.Unix(1, 0).UTC()}
	b := StreamDef{Tenant: "t", Namespace: "ns", Stream: "b", Shards: 1, Routing: "modulo", CreatedAt: time.Unix(2, 0).UTC()}
	for _, d := range []StreamDef{a, b} {
		if err := s.PutStream(d); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteStream(b); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.Streams()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, []StreamDef{a}) {
		t.Fatalf("after reopen: %+v, want [%+v]", got, a)
	}
}

func TestSecondOpenIsRefused(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := Open(dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open of %s: %v, want ErrLocked", dir, err)
	}
}

func TestProducersSurviveReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	a := ProducerDef{ID: 1 << 63, Tenant: "t", CreatedAt: time.Unix(1, 0).UTC()}
	b := ProducerDef{ID: 7, Tenant: "u", CreatedAt: time.Unix(2, 0).UTC()}
	for _, p := range []ProducerDef{a, b} {
		if err := s.PutProducer(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutProducer(ProducerDef{ID: 7, Tenant: "t"}); !errors.Is(err, ErrProducerExists) {
		t.Fatalf("recording id 7 again: %v, want ErrProducerExists", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.Producers()
	if err != nil {
		t.Fatal(err)
	}
	if want := []ProducerDef{b, a}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after reopen: %+v, want %+v (id order, the first owner kept)", got, want)
	}
}
