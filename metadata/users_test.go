package metadata

import (
	"bytes"
	"reflect"
	"testing"
	"time"
)

func TestKafkaUsersSurviveReopenAndDeleteWhole(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(5, 0).UTC()
	alice256 := KafkaUser{Tenant: "a", User: "alice", Mechanism: "SCRAM-SHA-256", Salt: []byte("salt"), Iterations: 4096, StoredKey: []byte{1}, ServerKey: []byte{2}, Grants: []string{"stream.publish:ns/*"}, CreatedAt: at}
	alice512 := alice256
	alice512.Mechanism = "SCRAM-SHA-512"
	// "a/alice2" must not be taken for one of "a/alice"'s credentials.
	alice2 := alice256
	alice2.User = "alice2"
	bob := alice256
	bob.Tenant, bob.User = "b", "bob"
	for _, u := range []KafkaUser{alice256, alice512, alice2, bob} {
		if err := s.PutKafkaUser(u); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir); err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	got, found, err := s.KafkaUser("a", "alice", "SCRAM-SHA-512")
	if err != nil || !found || !reflect.DeepEqual(got, alice512) {
		t.Fatalf("KafkaUser(a, alice, 512) = %+v, %v, %v; want %+v", got, found, err, alice512)
	}
	if _, found, _ := s.KafkaUser("b", "alice", "SCRAM-SHA-256"); found {
		t.Fatal("tenant b found tenant a's alice")
	}
	list, err := s.KafkaUsers("a")
	if err != nil || len(list) != 3 {
		t.Fatalf("KafkaUsers(a) = %d users, %v; want 3", len(list), err)
	}
	if all, _ := s.KafkaUsers(""); len(all) != 4 {
		t.Fatalf("KafkaUsers(\"\") = %d users, want 4", len(all))
	}
	if deleted, err := s.DeleteKafkaUser("a", "alice"); err != nil || !deleted {
		t.Fatalf("DeleteKafkaUser(a, alice) = %v, %v; want true", deleted, err)
	}
	if deleted, _ := s.DeleteKafkaUser("a", "alice"); deleted {
		t.Fatal("deleting alice twice reported a deletion")
	}
	list, _ = s.KafkaUsers("a")
	if len(list) != 1 || list[0].User != "alice2" {
		t.Fatalf("after deleting alice, tenant a has %+v; want only alice2", list)
	}
}

func TestSecretIsStableAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.Secret("x")
	if err != nil || len(first) != secretLen {
		t.Fatalf("Secret = %x, %v", first, err)
	}
	other, _ := s.Secret("y")
	if bytes.Equal(first, other) {
		t.Fatal("two secrets' names gave the same secret")
	}
	s.Close()
	if s, err = Open(dir); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	again, err := s.Secret("x")
	if err != nil || !bytes.Equal(again, first) {
		t.Fatalf("after reopen Secret = %x, %v; want %x", again, err, first)
	}
}
