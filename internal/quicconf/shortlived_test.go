package quicconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"sync"
	"testing"
	"time"
)

// TestShortLivedRenews: the certificate is ECDSA P-256, valid under 14
// days from a little before now, and hashed as a page needs it; it stays
// the same until its renewal is due, then the next handshake and Hash get
// a new one, still valid for days.
func TestShortLivedRenews(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	s, err := NewShortLived(clock)
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	leaf := first.Leaf
	if key, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || key.Curve != elliptic.P256() {
		t.Fatalf("public key %T, want ECDSA P-256", leaf.PublicKey)
	}
	if v := leaf.NotAfter.Sub(leaf.NotBefore); v >= 14*24*time.Hour {
		t.Fatalf("valid for %v, want under 14 days", v)
	}
	if !leaf.NotBefore.Before(clock()) || !leaf.NotAfter.After(clock().Add(9*24*time.Hour)) {
		t.Fatalf("valid %v..%v, want from before %v for 9 days at least", leaf.NotBefore, leaf.NotAfter, clock())
	}
	h1, err := s.Hash()
	if err != nil || h1 != sha256.Sum256(leaf.Raw) {
		t.Fatalf("Hash = %x, %v; want the SHA-256 of the DER %x", h1, err, sha256.Sum256(leaf.Raw))
	}

	advance(shortLivedRenewAfter - time.Minute)
	if c, _ := s.GetCertificate(nil); c != first {
		t.Fatal("renewed before it was due")
	}
	advance(2 * time.Minute)
	h2, err := s.Hash()
	if err != nil || h2 == h1 {
		t.Fatalf("Hash after %v = %x, %v; want a new certificate's", shortLivedRenewAfter, h2, err)
	}
	second, _ := s.GetCertificate(nil)
	if second == first || sha256.Sum256(second.Leaf.Raw) != h2 {
		t.Fatal("the handshake's certificate is not the one Hash names")
	}
	if left := second.Leaf.NotAfter.Sub(clock()); left < 9*24*time.Hour {
		t.Fatalf("the renewed certificate has %v left, want 9 days at least", left)
	}
}
