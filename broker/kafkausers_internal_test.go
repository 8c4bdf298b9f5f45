package broker

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/getfelix/felix-go/admin"
	"github.com/getfelix/felix-go/authgate"
	"github.com/getfelix/felix-go/config"
	"github.com/getfelix/felix-go/metadata"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// TestSCRAMRefusedInACluster: a cluster member keeps no Kafka users (they
// would have to be in etcd for every member to know them), so its Kafka
// listener offers no SCRAM, a SCRAM login that comes anyway is refused
// saying why, and the user routes refuse with admin.ErrNoKafkaUsers.
func TestSCRAMRefusedInACluster(t *testing.T) {
	store, err := metadata.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	gate, err := authgate.New(authgate.Config{DataDir: t.TempDir()}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b := &Broker{cfg: config.Config{ClusterEtcd: "127.0.0.1:2379"}, gate: gate, store: store}
	if err := b.setupKafkaUsers(); err != nil {
		t.Fatal(err)
	}
	if got := b.kafkaUsers.Mechanisms(); got != nil {
		t.Errorf("a cluster member offers %v; want no SCRAM", got)
	}
	_, err = b.StartSCRAM(service.Client{}, service.MechanismSCRAMSHA256)
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeUnauthenticated || !strings.Contains(err.Error(), "cluster member keeps no Kafka SCRAM users") {
		t.Errorf("StartSCRAM on a cluster member: %v; want unauthenticated saying a cluster member keeps no users", err)
	}
	if err := (adminMember{b}).PutKafkaUser(admin.KafkaUser{Tenant: "t", User: "u"}); !errors.Is(err, admin.ErrNoKafkaUsers) {
		t.Errorf("PutKafkaUser on a cluster member: %v; want ErrNoKafkaUsers", err)
	}
	if _, err := (adminMember{b}).KafkaUsers(""); !errors.Is(err, admin.ErrNoKafkaUsers) {
		t.Errorf("KafkaUsers on a cluster member: %v; want ErrNoKafkaUsers", err)
	}
}
