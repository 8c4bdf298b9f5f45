package cluster

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdDialTimeout bounds a client's first connection to etcd, and its
// login when EtcdUser is set.
const etcdDialTimeout = 2 * time.Second

// ErrEtcdPlaintext is an http:// etcd endpoint in a Config that sets
// EtcdTLS: etcd's client would reach it in plaintext, ignoring the TLS.
var ErrEtcdPlaintext = errors.New("cluster: etcd endpoint without TLS")

// etcdClientConfig is the member's etcd client configuration: TLS, and
// login's token on every request (login is nil without a user).
func (c Config) etcdClientConfig(login *etcdLogin) clientv3.Config {
	return clientv3.Config{
		Endpoints:   c.Endpoints,
		DialTimeout: etcdDialTimeout,
		// Without it, a request to an etcd that is down waits for ever.
		DialKeepAliveTime:    c.LeaseTTL / 2,
		DialKeepAliveTimeout: c.LeaseTTL / 2,
		TLS:                  c.EtcdTLS,
		DialOptions:          login.dialOptions(),
		Logger:               nopZap(),
	}
}

// checkEtcdEndpoints refuses an http:// endpoint when EtcdTLS is set.
// etcd's client takes TLS from the scheme and drops it for http://, so a
// member configured for TLS would otherwise talk to a plaintext etcd,
// credentials and all; config refuses that mix first, naming the knobs,
// and this keeps an embedder that fills Config itself from it.
func checkEtcdEndpoints(c Config) error {
	if c.EtcdTLS == nil {
		return nil
	}
	for _, ep := range c.Endpoints {
		if u, err := url.Parse(ep); err != nil || u.Scheme != "https" {
			return fmt.Errorf("%w: %s is not https:// but the member is configured for TLS to etcd", ErrEtcdPlaintext, ep)
		}
	}
	return nil
}
