package scramlogin

import (
	"fmt"
	"time"

	"github.com/getfelix/felix-go/admin"
	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/metadata"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// UserStore is where a broker keeps its Kafka users and the secret their
// decoys derive from: the metadata store.
type UserStore interface {
	Users
	PutKafkaUser(u metadata.KafkaUser) error
	KafkaUsers(tenant string) ([]metadata.KafkaUser, error)
	DeleteKafkaUser(tenant, user string) (bool, error)
	Secret(name string) ([]byte, error)
}

// KafkaUsers are the Kafka SCRAM users a broker keeps: the credentials the
// admin endpoint's user routes add, list and remove (admin.Member's
// PutKafkaUser, KafkaUsers and DeleteKafkaUser, which it implements), and
// the logins checked against them (Start). A broker that keeps none
// (NoKafkaUsers) refuses each call saying why.
type KafkaUsers struct {
	// store is nil where no users are kept, and none says why.
	store    UserStore
	none     string
	verifier *Verifier
}

// decoySecret names the store's secret the decoys derive from.
const decoySecret = "kafka-scram-decoy"

// OpenKafkaUsers keeps users in store, answering an unknown one with a
// decoy shaped as the credentials felix kafka user add makes.
func OpenKafkaUsers(store UserStore) (*KafkaUsers, error) {
	key, err := store.Secret(decoySecret)
	if err != nil {
		return nil, err
	}
	return &KafkaUsers{store: store, verifier: NewVerifier(store, Decoy{Key: key, SaltLen: admin.KafkaUserSaltLen, Iterations: admin.KafkaUserDefaultIterations})}, nil
}

// NoKafkaUsers keeps no users; why is each refusal's reason.
func NoKafkaUsers(why string) *KafkaUsers { return &KafkaUsers{none: why} }

// Mechanisms are the SCRAM mechanisms offered: both, where users are kept.
func (k *KafkaUsers) Mechanisms() []string {
	if k.store == nil {
		return nil
	}
	return []string{service.MechanismSCRAMSHA256, service.MechanismSCRAMSHA512}
}

// Start begins one login under mechanism; where no users are kept it is
// refused unauthenticated, saying why.
func (k *KafkaUsers) Start(mechanism string) (*Login, error) {
	if err := CheckMechanism(mechanism); err != nil {
		return nil, err
	}
	if k.store == nil {
		return nil, wire.NewError(wire.CodeUnauthenticated, "%s", k.none)
	}
	return k.verifier.Start(mechanism)
}

// refused is a user call's error where no users are kept.
func (k *KafkaUsers) refused() error {
	return fmt.Errorf("%w: %s", admin.ErrNoKafkaUsers, k.none)
}

// PutKafkaUser implements admin.Member: u's credential is checked (Check),
// its grants kept as their strings.
func (k *KafkaUsers) PutKafkaUser(u admin.KafkaUser) error {
	if k.store == nil {
		return k.refused()
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
	if err := Check(user, len(grants)); err != nil {
		return err
	}
	return k.store.PutKafkaUser(user)
}

// KafkaUsers implements admin.Member: the listing leaves salts and keys
// out, and a stored grant that no longer parses.
func (k *KafkaUsers) KafkaUsers(tenant string) ([]admin.KafkaUser, error) {
	if k.store == nil {
		return nil, k.refused()
	}
	users, err := k.store.KafkaUsers(tenant)
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
func (k *KafkaUsers) DeleteKafkaUser(tenant, user string) (bool, error) {
	if k.store == nil {
		return false, k.refused()
	}
	return k.store.DeleteKafkaUser(tenant, user)
}
