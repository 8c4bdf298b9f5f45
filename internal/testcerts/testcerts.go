// Package testcerts makes certificates for tests of mutual TLS between
// members: a CA, and leaves it signs that serve both as server and as
// client. It is internal/clustercerts with a test's failure handling.
package testcerts

import (
	"crypto/tls"
	"testing"

	"github.com/getfelix/felix-go/internal/clustercerts"
)

// CA is a test certificate authority: Cert, Key and Pool (what a member
// verifies peers against).
type CA struct{ *clustercerts.CA }

// NewCA makes a CA; the test fails if it cannot.
func NewCA(tb testing.TB) *CA {
	tb.Helper()
	ca, err := clustercerts.NewCA("test cluster CA")
	if err != nil {
		tb.Fatal(err)
	}
	return &CA{ca}
}

// Leaf issues a member certificate named name, usable as server and as
// client (mutual TLS checks the ClientAuth usage).
func (c *CA) Leaf(tb testing.TB, name string) tls.Certificate {
	tb.Helper()
	leaf, err := c.CA.Leaf(name)
	if err != nil {
		tb.Fatal(err)
	}
	return leaf
}
