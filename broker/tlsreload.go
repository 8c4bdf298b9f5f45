package broker

import (
	"crypto/tls"
	"errors"

	"github.com/getfelix/felix-go/internal/quicconf"
)

// serverTLS is a TLS config for a listener (felix/1, Kafka) whose
// certificate is the broker's one reloadable holder, loaded on first use:
// ReloadTLS swaps it for every listener's new connections at once. Each
// caller gets its own config to adjust (the Kafka listener drops felix/1's
// ALPN).
func (b *Broker) serverTLS() (*tls.Config, error) {
	if b.tlsCerts == nil {
		_, certs, err := quicconf.ReloadableServerTLS(b.cfg.TLSCert, b.cfg.TLSKey, b.cfg.DataDir)
		if err != nil {
			return nil, err
		}
		b.tlsCerts = certs
	}
	return b.tlsCerts.ServerConfig(), nil
}

// ReloadTLS reads the TLS certificate and key files again (the broker
// does it on SIGHUP): connections made after it get the new certificate,
// open ones keep theirs. A pair that does not load keeps the certificate
// in force and returns the error. The peer link's cluster certificates are
// not reloaded.
func (b *Broker) ReloadTLS() error {
	if b.tlsCerts == nil {
		return errors.New("broker: no listener has loaded a TLS certificate yet")
	}
	if err := b.tlsCerts.Reload(); err != nil {
		b.log.Error().Err(err).Msg("reload TLS certificate; keeping the certificate in force")
		return err
	}
	leaf := b.tlsCerts.Leaf()
	b.log.Info().Str("file", b.tlsCerts.CertFile()).Str("subject", leaf.Subject.String()).
		Str("serial", leaf.SerialNumber.Text(16)).Time("not_after", leaf.NotAfter).
		Msg("reloaded TLS certificate")
	return nil
}
