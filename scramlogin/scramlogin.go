// Package scramlogin owns the Kafka SCRAM users a broker keeps
// (KafkaUsers): their credentials, per tenant, one per mechanism (salt,
// iterations, StoredKey, ServerKey; never the password), each with the
// user's grants, added, listed and removed through the admin endpoint's
// user routes; and logins (RFC 5802, RFC 7677) checked against them, the
// grants becoming the session's principal as a token's do. xdg-go/scram
// runs the exchange; the Kafka listener only carries its messages, and the
// broker decides when to ask (its failed-login limiter) and what the
// principal opens. A broker that keeps no users (NoKafkaUsers: a cluster
// member, or auth none) offers no mechanism and refuses each call saying
// why.
//
// An unknown user is not told apart from a wrong password: the lookup
// answers a name it does not know with a decoy credential derived from a
// secret (stable across restarts, so its salt does not change when asked
// again), the exchange goes on the same way and the proof fails with the
// same error, ErrRefused.
package scramlogin

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"hash"
	"strings"
	"time"

	"github.com/xdg-go/scram"

	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/metadata"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// Bounds of a stored credential (Check). 4096 iterations is RFC 7677's
// minimum; 16384 is Kafka's maximum, past which a client spends
// noticeable CPU on every login.
const (
	MinIterations = 4096
	MaxIterations = 16384
	MinSaltLen    = 16
	MaxSaltLen    = 128
)

// ErrRefused is every refused SCRAM proof and every malformed message: one
// text, so that nothing tells an unknown user from a wrong password.
var ErrRefused = wire.NewError(wire.CodeUnauthenticated, "SCRAM authentication failed: unknown user or wrong password (the username is TENANT/USER)")

var hashes = map[string]scram.HashGeneratorFcn{
	service.MechanismSCRAMSHA256: scram.SHA256,
	service.MechanismSCRAMSHA512: scram.SHA512,
}

// Users is where credentials are looked up (the metadata store).
type Users interface {
	KafkaUser(tenant, user, mechanism string) (metadata.KafkaUser, bool, error)
}

// Verifier starts logins against users.
type Verifier struct {
	users Users
	decoy Decoy
}

// Decoy is what an unknown user is answered with: the secret its keys
// derive from, and the salt length and iterations of the credentials
// users are made with, so that a decoy looks like one of them.
type Decoy struct {
	Key        []byte
	SaltLen    int
	Iterations int
}

// NewVerifier checks logins against users.
func NewVerifier(users Users, decoy Decoy) *Verifier {
	return &Verifier{users: users, decoy: decoy}
}

// CheckMechanism refuses a name that is not a SCRAM mechanism.
func CheckMechanism(mechanism string) error {
	if _, ok := hashes[mechanism]; !ok {
		return wire.NewError(wire.CodeInvalidRequest, "no SCRAM mechanism %q: the mechanisms are %s and %s", mechanism, service.MechanismSCRAMSHA256, service.MechanismSCRAMSHA512)
	}
	return nil
}

// Start begins one exchange under mechanism.
func (v *Verifier) Start(mechanism string) (*Login, error) {
	if err := CheckMechanism(mechanism); err != nil {
		return nil, err
	}
	l := &Login{v: v, mechanism: mechanism}
	srv, err := hashes[mechanism].NewServer(l.lookup)
	if err != nil {
		return nil, wire.NewError(wire.CodeInternal, "scram: %v", err)
	}
	l.conv = srv.NewConversation()
	return l, nil
}

// Login is one exchange; one goroutine uses it (the connection's).
type Login struct {
	v         *Verifier
	mechanism string
	conv      *scram.ServerConversation
	// user is the credential the lookup found; nil for a decoy.
	user *metadata.KafkaUser
	// lookupErr is a store failure the lookup met (not a missing user).
	lookupErr error
}

// Step answers the client's message msg: the reply to send, or ErrRefused
// (a storage failure is a storage error). Done says whether the exchange
// is over; it is over and valid once Step has answered its last message
// without an error.
func (l *Login) Step(msg []byte) (string, error) {
	reply, err := l.conv.Step(string(msg))
	if l.lookupErr != nil {
		return "", wire.NewError(wire.CodeStorage, "scram: %v", l.lookupErr)
	}
	// As Kafka: an authorization id, if any, must be the user.
	if err != nil || l.conv.Done() && (!l.conv.Valid() || l.user == nil) ||
		l.conv.AuthzID() != "" && l.conv.AuthzID() != l.conv.Username() {
		return "", ErrRefused
	}
	return reply, nil
}

// Done says whether the exchange is over.
func (l *Login) Done() bool { return l.conv.Done() }

// Principal is the authenticated user's, once Done: its tenant and
// grants, expiring at expires (a SCRAM login has no expiry of its own;
// removing the user refuses its next login, not the sessions it has).
func (l *Login) Principal(expires time.Time) (*auth.Principal, error) {
	grants := make([]auth.Grant, 0, len(l.user.Grants))
	for _, s := range l.user.Grants {
		g, err := auth.ParseGrant(s)
		if err != nil {
			return nil, wire.NewError(wire.CodeInternal, "kafka user %s/%s has a grant that does not parse: %v", l.user.Tenant, l.user.User, err)
		}
		grants = append(grants, g)
	}
	return &auth.Principal{Tenant: l.user.Tenant, Subject: "kafka-user:" + l.user.User, Grants: grants, Expires: expires}, nil
}

// lookup is xdg-go's credential lookup: the user's credential, or a
// decoy for a name it does not know.
func (l *Login) lookup(username string) (scram.StoredCredentials, error) {
	tenant, user, ok := strings.Cut(username, "/")
	if ok && wire.ValidateName("tenant", tenant) == nil && wire.ValidateName("user", user) == nil {
		u, found, err := l.v.users.KafkaUser(tenant, user, l.mechanism)
		if err != nil {
			l.lookupErr = err
			return scram.StoredCredentials{}, err
		}
		if found {
			l.user = &u
			return scram.StoredCredentials{KeyFactors: scram.KeyFactors{Salt: string(u.Salt), Iters: u.Iterations}, StoredKey: u.StoredKey, ServerKey: u.ServerKey}, nil
		}
	}
	return l.v.decoy.credential(l.mechanism, username), nil
}

// credential is the one an unknown username is answered with: a salt and
// keys no password derives, the same each time it is asked.
func (d Decoy) credential(mechanism, username string) scram.StoredCredentials {
	derive := func(h func() hash.Hash, what string) []byte {
		m := hmac.New(h, d.Key)
		m.Write([]byte(what + "\x00" + mechanism + "\x00" + username))
		return m.Sum(nil)
	}
	h := sha256.New
	if mechanism == service.MechanismSCRAMSHA512 {
		h = sha512.New
	}
	salt := derive(sha256.New, "salt")[:min(d.SaltLen, sha256.Size)]
	return scram.StoredCredentials{
		KeyFactors: scram.KeyFactors{Salt: string(salt), Iters: d.Iterations},
		StoredKey:  derive(h, "stored"),
		ServerKey:  derive(h, "server"),
	}
}

// Check checks a credential before it is stored: names, mechanism,
// iterations, salt and key lengths, and at least one grant.
func Check(u metadata.KafkaUser, grants int) error {
	if err := wire.ValidateName("tenant", u.Tenant); err != nil {
		return err
	}
	if err := wire.ValidateName("user", u.User); err != nil {
		return err
	}
	hashFn, ok := hashes[u.Mechanism]
	if !ok {
		return wire.NewError(wire.CodeInvalidRequest, "mechanism %q: use %s or %s", u.Mechanism, service.MechanismSCRAMSHA256, service.MechanismSCRAMSHA512)
	}
	size := hashFn().Size()
	switch {
	case u.Iterations < MinIterations || u.Iterations > MaxIterations:
		return wire.NewError(wire.CodeInvalidRequest, "iterations %d: use %d to %d", u.Iterations, MinIterations, MaxIterations)
	case len(u.Salt) < MinSaltLen || len(u.Salt) > MaxSaltLen:
		return wire.NewError(wire.CodeInvalidRequest, "a salt of %d bytes: use %d to %d", len(u.Salt), MinSaltLen, MaxSaltLen)
	case len(u.StoredKey) != size || len(u.ServerKey) != size:
		return wire.NewError(wire.CodeInvalidRequest, "%s keys are %d bytes, got a stored key of %d and a server key of %d", u.Mechanism, size, len(u.StoredKey), len(u.ServerKey))
	case grants == 0:
		return wire.NewError(wire.CodeInvalidRequest, "a user without grants can do nothing: give at least one (the grant syntax of felix token create)")
	}
	return nil
}
