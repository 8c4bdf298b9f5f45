package scramlogin

import (
	"errors"
	"testing"
	"time"

	"github.com/xdg-go/scram"

	"github.com/getfelix/felix-go/metadata"
	"github.com/getfelix/felix-go/service"
)

type users map[string]metadata.KafkaUser

func (u users) KafkaUser(tenant, user, mechanism string) (metadata.KafkaUser, bool, error) {
	k, ok := u[tenant+"/"+user+"/"+mechanism]
	return k, ok, nil
}

// login runs a whole exchange as a client with password; the server's
// first message is returned too (its salt).
func login(t *testing.T, v *Verifier, name, password string) (*Login, string, error) {
	t.Helper()
	c, err := scram.SHA256.NewClient(name, password, "")
	if err != nil {
		t.Fatal(err)
	}
	conv := c.NewConversation()
	l, err := v.Start(service.MechanismSCRAMSHA256)
	if err != nil {
		t.Fatal(err)
	}
	var first, in string
	for {
		out, err := conv.Step(in)
		if err != nil || conv.Done() {
			return l, first, err // the client checked the server's final message
		}
		if in, err = l.Step([]byte(out)); err != nil {
			return l, first, err
		}
		if first == "" {
			first = in
		}
	}
}

// TestLogin: the right password logs in as the user, with its grants; a
// wrong password and an unknown user are refused with the same error, and
// an unknown user's salt is the same on every attempt.
func TestLogin(t *testing.T) {
	c, _ := scram.SHA256.NewClient("a/ann", "secret", "")
	salt := "0123456789abcdef0123456789abcdef"
	cred := c.GetStoredCredentials(scram.KeyFactors{Salt: salt, Iters: 4096})
	v := NewVerifier(users{"a/ann/" + service.MechanismSCRAMSHA256: {
		Tenant: "a", User: "ann", Mechanism: service.MechanismSCRAMSHA256, Salt: []byte(salt), Iterations: 4096,
		StoredKey: cred.StoredKey, ServerKey: cred.ServerKey, Grants: []string{"stream.publish:*/*"},
	}}, Decoy{Key: []byte("k"), SaltLen: 32, Iterations: 4096})

	l, _, err := login(t, v, "a/ann", "secret")
	if err != nil || !l.Done() {
		t.Fatalf("the right password: done %v, %v", l.Done(), err)
	}
	p, err := l.Principal(time.Now().Add(time.Hour))
	if err != nil || p.Tenant != "a" || len(p.Grants) != 1 {
		t.Fatalf("principal %+v, %v", p, err)
	}
	if _, _, err := login(t, v, "a/ann", "wrong"); !errors.Is(err, ErrRefused) {
		t.Fatalf("a wrong password: %v; want ErrRefused", err)
	}
	_, first1, err1 := login(t, v, "a/bob", "secret")
	_, first2, _ := login(t, v, "a/bob", "other")
	if !errors.Is(err1, ErrRefused) {
		t.Fatalf("an unknown user: %v; want ErrRefused", err1)
	}
	if salt1, salt2 := saltOf(t, first1), saltOf(t, first2); salt1 != salt2 || salt1 == "" {
		t.Fatalf("an unknown user's salt changed between attempts: %q, %q", salt1, salt2)
	}
	if err := CheckMechanism("SCRAM-MD5"); err == nil {
		t.Fatal("an unknown mechanism was taken")
	}
}

// saltOf is the s= attribute of a server-first message.
func saltOf(t *testing.T, serverFirst string) string {
	t.Helper()
	for _, attr := range splitAttrs(serverFirst) {
		if len(attr) > 2 && attr[:2] == "s=" {
			return attr[2:]
		}
	}
	return ""
}

func splitAttrs(s string) []string {
	var out []string
	start := 0
	for i := range len(s) {
		if s[i] == ',' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}
