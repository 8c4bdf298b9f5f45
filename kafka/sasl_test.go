package kafka

import (
	"slices"
	"strings"
	"testing"
)

// TestNotAuthenticatedNamesMechanisms: the refusal of a client that sent
// a request before logging in names every mechanism the handshake offers.
func TestNotAuthenticatedNamesMechanisms(t *testing.T) {
	for _, scram := range [][]string{nil, {"SCRAM-SHA-256", "SCRAM-SHA-512"}} {
		l := &Listener{cfg: Config{SCRAMMechanisms: scram}}
		want := append([]string{"PLAIN", "OAUTHBEARER"}, scram...)
		if got := l.mechanisms(); !slices.Equal(got, want) {
			t.Errorf("with SCRAM %v the handshake offers %v, want %v", scram, got, want)
		}
		for _, m := range want {
			if err := l.errNotAuthenticated(); !strings.Contains(err.Error(), m) {
				t.Errorf("%q does not name the offered mechanism %s", err, m)
			}
		}
	}
}
