package broker

import (
	"context"
	"net"
	"time"

	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/kafka"
)

// anonymousTokenTTL is how long the token of an anonymous Kafka session
// lasts. A Kafka session subscribes to nothing, so its expiry ends nothing
// but the principal; the listener mints one per connection.
const anonymousTokenTTL = 24 * time.Hour

// listenKafka starts the Kafka front end (kafka_listen) in front of the
// same service as felix/1; nothing when it is not set.
func (b *Broker) listenKafka() error {
	if b.cfg.KafkaListen == "" {
		return nil
	}
	cfg := kafka.Config{
		Addr:             b.cfg.KafkaListen,
		Advertise:        b.cfg.KafkaAdvertise,
		AutoCreate:       b.cfg.KafkaAutoCreateTopics == "create",
		AutoCreateShards: uint32(b.cfg.KafkaAutoCreateShards),
		DefaultNamespace: b.cfg.KafkaDefaultNamespace,
		AnonymousTenant:  b.cfg.KafkaAnonymousTenant,
		SCRAMMechanisms:  b.kafkaUsers.Mechanisms(),
		MaxRequestBytes:  int(b.cfg.KafkaMaxRequestBytes),
		MaxBatchBytes:    int(b.cfg.KafkaMaxBatchBytes),
		MaxInflight:      b.cfg.KafkaMaxInflight,

		MaxRequestDecompressedBytes: int(b.cfg.KafkaMaxRequestDecompressedBytes),
		MaxInflightRequestBytes:     int(b.cfg.KafkaMaxInflightRequestBytes),
		FetchMaxBytes:               int(b.cfg.KafkaFetchMaxBytes),
		MaxInflightFetchBytes:       int(b.cfg.KafkaMaxInflightFetchBytes),
		RequestReadTimeout:          b.cfg.KafkaRequestReadTimeout,
		IdleTimeout:                 b.cfg.KafkaIdleTimeout,
		DefaultRetentionBytes:       b.cfg.DurableRetentionBytes,
		DefaultRetentionAge:         b.cfg.DurableRetentionAge,
		// The felix/1 limits hold for Kafka clients too: one connection
		// count, one per-IP count, one handshake deadline and frame cap.
		AuthTimeout:            b.cfg.AuthTimeout,
		PreAuthMaxRequestBytes: b.cfg.PreAuthMaxFrameBytes,
		Admit:                  b.admitConnection,
		Hooks:                  b.metrics.RegisterKafka(),
		Log:                    b.log,
	}
	if b.cfg.KafkaTLS {
		tlsConf, err := b.serverTLS()
		if err != nil {
			return err
		}
		tlsConf.NextProtos = nil // the felix/1 ALPN is not Kafka's
		cfg.TLS = tlsConf
	}
	if b.clustered() {
		cfg.Cluster = kafkaCluster{b}
	}
	if cfg.AnonymousTenant != "" && b.gate.Tokens() {
		cfg.AnonymousToken = b.anonymousToken(cfg.AnonymousTenant)
	}
	ln, err := kafka.Listen(b, cfg)
	if err != nil {
		return err
	}
	b.kafka = ln
	b.log.Info().Str("kafka", ln.Addr().String()).Msg("kafka listener started")
	return nil
}

// anonymousToken mints, with the data directory's own key, a token with
// every right on tenant: what an anonymous Kafka client gets.
func (b *Broker) anonymousToken(tenant string) func() (string, error) {
	return func() (string, error) {
		signer, err := auth.LocalSigner(b.cfg.DataDir)
		if err != nil {
			return "", err
		}
		token, _, err := signer.Mint(auth.Claims{Tenant: tenant, Grants: auth.AdminGrants()}, anonymousTokenTTL)
		return token, err
	}
}

// KafkaAddr is the Kafka listener's bound address, or nil when it is off.
func (b *Broker) KafkaAddr() net.Addr {
	if b.kafka == nil {
		return nil
	}
	return b.kafka.Addr()
}

// closeKafka stops the Kafka listener first, so its sessions end before
// the actors they use.
func (b *Broker) closeKafka(ctx context.Context) error {
	if b.kafka == nil {
		return nil
	}
	return b.kafka.Close(ctx)
}
