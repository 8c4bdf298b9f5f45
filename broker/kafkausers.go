package broker

import (
	"context"
	"errors"
	"time"

	"github.com/getfelix/felix-go/admin"
	"github.com/getfelix/felix-go/authgate"
	"github.com/getfelix/felix-go/scramlogin"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// Kafka SCRAM users are scramlogin's: a single broker keeps them in its
// metadata store, and each step of a login runs here under the
// failed-login limiter as a token does; the user's grants become the
// session's principal. A cluster member keeps no users (they would have
// to live in etcd for every member to know them): it does not offer
// SCRAM, and its user routes refuse.

var _ service.SCRAMService = (*Broker)(nil)

// setupKafkaUsers opens the users a single broker with tokens keeps, or
// says why there are none.
func (b *Broker) setupKafkaUsers() (err error) {
	switch {
	case b.clustered():
		b.kafkaUsers = scramlogin.NoKafkaUsers("a cluster member keeps no Kafka SCRAM users (they are kept by a single broker only): Kafka clients of a cluster log in with PLAIN or OAUTHBEARER and a token")
	case !b.gate.Tokens():
		b.kafkaUsers = scramlogin.NoKafkaUsers("a broker under auth none keeps no Kafka SCRAM users: every client already gets every right on the tenant it names")
	default:
		b.kafkaUsers, err = scramlogin.OpenKafkaUsers(b.store)
	}
	return err
}

// StartSCRAM implements service.SCRAMService.
func (b *Broker) StartSCRAM(client service.Client, mechanism string) (service.SCRAMLogin, error) {
	l, err := b.kafkaUsers.Start(mechanism)
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

// The user routes' calls of admin.Member are the users'.

func (m adminMember) PutKafkaUser(u admin.KafkaUser) error { return m.kafkaUsers.PutKafkaUser(u) }

func (m adminMember) KafkaUsers(tenant string) ([]admin.KafkaUser, error) {
	return m.kafkaUsers.KafkaUsers(tenant)
}

func (m adminMember) DeleteKafkaUser(tenant, user string) (bool, error) {
	return m.kafkaUsers.DeleteKafkaUser(tenant, user)
}
