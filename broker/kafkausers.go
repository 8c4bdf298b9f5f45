package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/getfelix/felix-go/admin"
	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/authgate"
	"github.com/getfelix/felix-go/metadata"
	"github.com/getfelix/felix-go/scramlogin"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// Kafka SCRAM users: a single broker keeps them in its metadata store and
// checks logins with scramlogin, each step under the failed-login limiter
// as a token is; the grants become the session's principal. A cluster
// member keeps no users (they would have to live in etcd for every member
// to know them): it does not offer SCRAM, and its user routes refuse.

var _ service.SCRAMService = (*Broker)(nil)

// scramDecoySecret names the store's secret the decoys derive from.
const scramDecoySecret = "kafka-scram-decoy"

// scramOffered reports whether this broker keeps Kafka users: a single
// broker with tokens (under auth none there are no credentials to check).
func (b *Broker) scramOffered() bool {
	return b.gate.Tokens() && !b.clustered() && b.store != nil
}

// setupSCRAM reads the decoy secret, when SCRAM is offered.
func (b *Broker) setupSCRAM() error {
	if !b.scramOffered() {
		return nil
	}
	key, err := b.store.Secret(scramDecoySecret)
	if err != nil {
		return err
	}
	b.scram = scramlogin.NewVerifier(b.store, scramlogin.Decoy{Key: key, SaltLen: admin.KafkaUserSaltLen, Iterations: admin.KafkaUserDefaultIterations})
	return nil
}

// noUsers says why this broker keeps no Kafka users.
func (b *Broker) noUsers() string {
	if b.clustered() {
		return "a cluster member keeps no Kafka SCRAM users (they are kept by a single broker only): Kafka clients of a cluster log in with PLAIN or OAUTHBEARER and a token"
	}
	return "a broker under auth none keeps no Kafka SCRAM users: every client already gets every right on the tenant it names"
}

// StartSCRAM implements service.SCRAMService.
func (b *Broker) StartSCRAM(client service.Client, mechanism string) (service.SCRAMLogin, error) {
	if err := scramlogin.CheckMechanism(mechanism); err != nil {
		return nil, err
	}
	if b.scram == nil {
		return nil, wire.NewError(wire.CodeUnauthenticated, "%s", b.noUsers())
	}
	l, err := b.scram.Start(mechanism)
	if err != nil {
		return nil, err
	}
	return &scramLogin{b: b, client: client, login: l}, nil
}

// scramLogin is one exchange; one goroutine uses it (the connection's).
type scramLogin struct {
	b      *Broker
	client service.Client
	login  *scramlogin.Login
}

// Step implements service.SCRAMLogin. Each step is checked under the
// failed-login limiter, as a token is: a throttled address is refused
// before the exchange reads its message, and a failed step counts
// against it.
func (l *scramLogin) Step(ctx context.Context, msg []byte) (*service.SCRAMStep, error) {
	var reply string
	err := l.b.gate.CheckCredential(l.client, time.Now(), func() error {
		var err error
		if reply, err = l.login.Step(msg); errors.Is(err, scramlogin.ErrRefused) {
			l.b.metrics.AuthRefused.WithLabelValues("scram_refused").Inc()
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	step := &service.SCRAMStep{Reply: []byte(reply)}
	if !l.login.Done() {
		return step, nil
	}
	p, err := l.login.Principal(authgate.NoExpiry)
	if err != nil {
		return nil, err
	}
	client := l.client
	client.Tenant, client.Token = p.Tenant, ""
	if l.b.cfg.TLSClientCertBindSubject && client.CertSubject != client.Tenant {
		l.b.metrics.AuthRefused.WithLabelValues("certificate_subject").Inc()
		return nil, wire.NewError(wire.CodeUnauthenticated, "the client certificate's subject %q is not the tenant %q this user belongs to (tls_client_cert_bind_subject)", client.CertSubject, client.Tenant)
	}
	if step.Session, err = l.b.openSession(ctx, client, p); err != nil {
		return nil, err
	}
	step.Tenant = p.Tenant
	return step, nil
}

// PutKafkaUser implements admin.Member.
func (m adminMember) PutKafkaUser(u admin.KafkaUser) error {
	if !m.scramOffered() {
		return fmt.Errorf("%w: %s", admin.ErrNoKafkaUsers, m.noUsers())
	}
	grants := make([]string, len(u.Grants))
	for i, g := range u.Grants {
		grants[i] = g.String()
	}
	user := metadata.KafkaUser{
		Tenant: u.Tenant, User: u.User, Mechanism: u.Mechanism,
		Salt: u.Salt, Iterations: u.Iterations, StoredKey: u.StoredKey, ServerKey: u.ServerKey,
		Grants: grants, CreatedAt: time.Now().UTC(),
	}
	if err := scramlogin.Check(user, len(grants)); err != nil {
		return err
	}
	return m.store.PutKafkaUser(user)
}

// KafkaUsers implements admin.Member.
func (m adminMember) KafkaUsers(tenant string) ([]admin.KafkaUser, error) {
	if !m.scramOffered() {
		return nil, fmt.Errorf("%w: %s", admin.ErrNoKafkaUsers, m.noUsers())
	}
	users, err := m.store.KafkaUsers(tenant)
	if err != nil {
		return nil, err
	}
	out := make([]admin.KafkaUser, 0, len(users))
	for _, u := range users {
		grants := make([]auth.Grant, 0, len(u.Grants))
		for _, s := range u.Grants {
			if g, err := auth.ParseGrant(s); err == nil {
				grants = append(grants, g)
			}
		}
		out = append(out, admin.KafkaUser{Tenant: u.Tenant, User: u.User, Mechanism: u.Mechanism, Iterations: u.Iterations, Grants: grants, CreatedAt: u.CreatedAt})
	}
	return out, nil
}

// DeleteKafkaUser implements admin.Member.
func (m adminMember) DeleteKafkaUser(tenant, user string) (bool, error) {
	if !m.scramOffered() {
		return false, fmt.Errorf("%w: %s", admin.ErrNoKafkaUsers, m.noUsers())
	}
	return m.store.DeleteKafkaUser(tenant, user)
}

// kafkaSCRAMMechanisms are the SCRAM mechanisms the Kafka listener
// offers: both, where the broker keeps users.
func (b *Broker) kafkaSCRAMMechanisms() []string {
	if !b.scramOffered() {
		return nil
	}
	return []string{service.MechanismSCRAMSHA256, service.MechanismSCRAMSHA512}
}
